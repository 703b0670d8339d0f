package repository

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// outboxTopics counts the outbox rows of topic.
func outboxTopics(t *testing.T, s *Store, topic string) int {
	t.Helper()
	return outboxRows(t, s, "topic = ?", topic)
}

// searchIndexed is migrated's store with a search engine in use
// (UseSearchIndex; vectors: the engine keeps the chunks' vectors).
func searchIndexed(t *testing.T, vectors bool) (*Store, context.Context) {
	t.Helper()
	s, ctx := migrated(t)
	s.UseSearchIndex(outboxID, vectors)
	return s, ctx
}

// outboxID numbers the search-index outbox rows, as UseSearchIndex needs.
func outboxID() (service.ID, error) { return newID(), nil }

// With a search engine, committed chunks leave the document running with
// a search-index message queued; the reaper's stuck-document scan leaves it
// alone; SearchIndexed makes it ready only for the state it mirrored; a
// delete queues the removal.
func TestSearchIndexLifecycle(t *testing.T) {
	s, ctx := searchIndexed(t, true)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "alpha beta")
	if _, err := s.ClaimDocument(ctx, d.ID, 1); err != nil {
		t.Fatal(err)
	}
	c := chunk(0, "alpha beta", unit(4, 1), "alpha", "beta")
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{c}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Document(ctx, d.ID)
	if err != nil || got.Status != service.DocumentRunning || got.ChunkCount != 1 {
		t.Fatalf("after ReplaceChunks: %+v %v", got, err)
	}
	if n := outboxTopics(t, s, service.SearchIndexTopic); n != 1 {
		t.Fatalf("%d search-index messages, want 1", n)
	}
	stuck, err := s.StuckDocuments(ctx, time.Now().Add(time.Hour), 10)
	if err != nil || len(stuck) != 0 {
		t.Fatalf("a document waiting for the search engine is not stuck in ingestion: %v %v", stuck, err)
	}

	st, err := s.DocumentSearchState(ctx, d.ID)
	if err != nil || !st.Live || st.Generation != 1 || st.PendingSince == nil || len(st.Chunks) != 1 ||
		st.Chunks[0].ID != c.ID || st.Chunks[0].KnowledgeBaseID != kb.ID || st.Chunks[0].Content != "alpha beta" {
		t.Fatalf("state: %+v %v", st, err)
	}
	// A stale acknowledgement (another change came since) changes nothing.
	if err := s.SearchIndexed(ctx, d.ID, 1, st.PendingSince.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Document(ctx, d.ID); got.Status != service.DocumentRunning {
		t.Fatalf("stale acknowledgement made it %s", got.Status)
	}
	// The reaper queues the message again for a copy long behind.
	if n, err := s.RequeueSearchIndex(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	if n := outboxTopics(t, s, service.SearchIndexTopic); n != 2 {
		t.Fatalf("%d search-index messages after the requeue, want 2", n)
	}
	st, _ = s.DocumentSearchState(ctx, d.ID)
	if err := s.SearchIndexed(ctx, d.ID, 1, *st.PendingSince); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Document(ctx, d.ID); got.Status != service.DocumentReady {
		t.Fatalf("after SearchIndexed: %s", got.Status)
	}
	if n, err := s.RequeueSearchIndex(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("requeue of a current copy: %d %v", n, err)
	}

	res, _, err := s.ChunkResults(ctx, []service.SearchHit{{ChunkID: newID(), Score: 3}, {ChunkID: c.ID, Score: 2}})
	if err != nil || len(res) != 1 || res[0].ChunkID != c.ID || res[0].DocumentID != d.ID || res[0].Score != 2 || res[0].Content != "alpha beta" {
		t.Fatalf("ChunkResults keeps only chunks Postgres has: %+v %v", res, err)
	}

	if err := s.DeleteDocument(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	st, err = s.DocumentSearchState(ctx, d.ID)
	if err != nil || st.Live || st.PendingSince == nil || len(st.Chunks) != 0 {
		t.Fatalf("deleted state: %+v %v", st, err)
	}
	if n := outboxTopics(t, s, service.SearchIndexTopic); n != 3 {
		t.Fatalf("%d search-index messages after the delete, want 3", n)
	}
	if err := s.SearchIndexed(ctx, d.ID, 1, *st.PendingSince); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RequeueSearchIndex(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("requeue after the removal was mirrored: %d %v", n, err)
	}
}

// Without a search engine nothing changes: ReplaceChunks makes the
// document ready and queues no search-index message.
func TestNoSearchIndexByDefault(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "alpha")
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{chunk(0, "alpha", unit(4, 0), "alpha")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Document(ctx, d.ID); got.Status != service.DocumentReady {
		t.Fatalf("status %s", got.Status)
	}
	if n := outboxTopics(t, s, service.SearchIndexTopic); n != 0 {
		t.Fatalf("%d search-index messages", n)
	}
}

// Migration 0010 upgrades a database with documents: they keep their
// status, their search copy counts as current, and the columns work.
func TestMigrateSearchIndexColumn(t *testing.T) {
	s := openTest(t, testenv.FreshDatabase(t))
	ctx := context.Background()
	migrateBefore(t, s, "0010")
	kb := oldKB(t, s)
	d := oldDoc(t, s, kb)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Document(ctx, d.ID)
	if err != nil || got.Status != service.DocumentReady {
		t.Fatalf("document after the migration: %+v %v", got, err)
	}
	st, err := s.DocumentSearchState(ctx, d.ID)
	if err != nil || !st.Live || st.Generation != 1 || st.PendingSince != nil {
		t.Fatalf("state: %+v %v", st, err)
	}
	s.UseSearchIndex(outboxID, true)
	if n, err := s.RequeueSearchIndex(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("requeue: %d %v", n, err)
	}
}

// A replace's message lists the chunks it removed; SearchFailed fails the
// running generation with its reason and stops the reaper's re-queue.
func TestSearchIndexRemovedAndFailed(t *testing.T) {
	s, ctx := searchIndexed(t, false)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "alpha beta")
	old := chunk(0, "alpha", unit(4, 1), "alpha")
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{old}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{chunk(0, "beta", unit(4, 1), "beta")}); err != nil {
		t.Fatal(err)
	}
	var payloads []string
	if err := s.db.Raw("SELECT convert_from(payload, 'UTF8') FROM outbox WHERE topic = ? ORDER BY id", service.SearchIndexTopic).
		Scan(&payloads).Error; err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(payloads, "\n"); len(payloads) != 2 || strings.Count(all, `"listed":true`) != 2 ||
		!strings.Contains(all, `"removed":["`+old.ID.String()+`"]`) {
		t.Fatalf("search-index messages %v, want the replace's to list chunk %s", payloads, old.ID)
	}
	st, err := s.DocumentSearchState(ctx, d.ID)
	if err != nil || len(st.Chunks) != 1 || st.Chunks[0].Embedding != nil {
		t.Fatalf("state without vectors: %+v %v", st, err)
	}
	if _, err := s.ClaimDocument(ctx, d.ID, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.SearchFailed(ctx, d.ID, 1, *st.PendingSince, "too large"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Document(ctx, d.ID); got.Status != service.DocumentFailed || got.Error != "too large" {
		t.Fatalf("after SearchFailed: %s %q", got.Status, got.Error)
	}
	if n, err := s.RequeueSearchIndex(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("requeue after SearchFailed: %d %v", n, err)
	}
}

// ReplaceIndexedChunks writes to the engine inside the commit: a first
// generation turns ready with no search-index message and no wait for a
// refresh; a replacement asks for its chunks searchable before the commit
// and queues only the old chunks' removal; an engine that fails a first
// generation leaves it committed and running for the consumer, a
// replacement or a permanent refusal rolls back.
func TestReplaceIndexedChunks(t *testing.T) {
	s, ctx := searchIndexed(t, false)
	kb := seedKB(t, s, 4)
	type call struct{ visible, vectors bool }
	var calls []call
	write := func(err error) func(context.Context, bool, bool) error {
		return func(_ context.Context, visible, vectors bool) error {
			calls = append(calls, call{visible, vectors})
			return err
		}
	}
	status := func(id service.ID) *service.Document {
		t.Helper()
		got, err := s.Document(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	d := seedDoc(t, s, kb, "alpha beta")
	space := docSpace(t, s, d.ID)
	first := chunk(0, "alpha", unit(4, 1), "alpha")
	if err := s.ReplaceIndexedChunks(ctx, d.ID, 1, space, []service.Chunk{first}, write(nil)); err != nil {
		t.Fatal(err)
	}
	if got := status(d.ID); got.Status != service.DocumentReady || got.ChunkCount != 1 ||
		len(calls) != 1 || calls[0] != (call{false, true}) || outboxTopics(t, s, service.SearchIndexTopic) != 0 {
		t.Fatalf("first generation: %s, calls %v, %d messages", got.Status, calls, outboxTopics(t, s, service.SearchIndexTopic))
	}

	// A replacement: searchable before the commit, the removal queued.
	second := chunk(0, "beta", unit(4, 1), "beta")
	if err := s.ReplaceIndexedChunks(ctx, d.ID, 1, space, []service.Chunk{second}, write(nil)); err != nil {
		t.Fatal(err)
	}
	var payloads []string
	if err := s.db.Raw("SELECT convert_from(payload, 'UTF8') FROM outbox WHERE topic = ?", service.SearchIndexTopic).
		Scan(&payloads).Error; err != nil {
		t.Fatal(err)
	}
	if got := status(d.ID); got.Status != service.DocumentReady || len(calls) != 2 || calls[1] != (call{true, true}) ||
		len(payloads) != 1 || !strings.Contains(payloads[0], `"removed":["`+first.ID.String()+`"]`) {
		t.Fatalf("replacement: %s, calls %v, messages %v", got.Status, calls, payloads)
	}
	if st, _ := s.DocumentSearchState(ctx, d.ID); st.PendingSince == nil {
		t.Fatal("the removal's copy is not marked behind, so the reaper would not re-queue it")
	}

	// A replacement the engine fails rolls back: the old chunks stay.
	if err := s.ReplaceIndexedChunks(ctx, d.ID, 1, space, []service.Chunk{chunk(0, "gamma", unit(4, 1), "gamma")},
		write(service.ErrSearchUnavailable)); !errors.Is(err, service.ErrSearchUnavailable) {
		t.Fatalf("failed replacement: %v", err)
	}
	if ids, _ := s.SearchChunkIDs(ctx, d.ID); len(ids) != 1 || ids[0] != second.ID {
		t.Fatalf("chunks after a failed replacement: %v, want %s", ids, second.ID)
	}

	// A first generation the engine fails is committed, running, for the
	// consumer; a permanent refusal rolls back.
	e := seedDoc(t, s, kb, "delta")
	if _, err := s.ClaimDocument(ctx, e.ID, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceIndexedChunks(ctx, e.ID, 1, space, []service.Chunk{chunk(0, "delta", unit(4, 1), "delta")},
		write(fmt.Errorf("%w: %w", service.ErrPermanent, service.ErrTooLarge))); !errors.Is(err, service.ErrPermanent) {
		t.Fatalf("refused first generation: %v", err)
	}
	if ids, _ := s.SearchChunkIDs(ctx, e.ID); len(ids) != 0 {
		t.Fatalf("a refused generation left chunks %v", ids)
	}
	if err := s.ReplaceIndexedChunks(ctx, e.ID, 1, space, []service.Chunk{chunk(0, "delta", unit(4, 1), "delta")},
		write(service.ErrSearchUnavailable)); err != nil {
		t.Fatal(err)
	}
	if got := status(e.ID); got.Status != service.DocumentRunning || got.ChunkCount != 1 || outboxTopics(t, s, service.SearchIndexTopic) != 2 {
		t.Fatalf("first generation the engine failed: %s, %d chunks, %d messages", got.Status, got.ChunkCount, outboxTopics(t, s, service.SearchIndexTopic))
	}
}

// A rebuild's start (WithSearchRebuildLock) waits for a commit whose chunks
// are being written to the engine, and a write does not start during it.
func TestSearchRebuildLock(t *testing.T) {
	s, ctx := searchIndexed(t, false)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "alpha")
	space := docSpace(t, s, d.ID)
	writing, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.ReplaceIndexedChunks(ctx, d.ID, 1, space, []service.Chunk{chunk(0, "alpha", unit(4, 1), "alpha")},
			func(context.Context, bool, bool) error { close(writing); <-release; return nil })
	}()
	<-writing
	began := make(chan time.Time, 1)
	go func() {
		_ = s.WithSearchRebuildLock(ctx, func(context.Context) error { began <- time.Now(); return nil })
	}()
	select {
	case <-began:
		t.Fatal("a rebuild began while a commit was writing to the engine")
	case <-time.After(300 * time.Millisecond):
	}
	committed := time.Now()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if at := <-began; at.Before(committed) {
		t.Fatal("the rebuild began before the commit")
	}

	// Held by a rebuild, the lock holds back the next write.
	e := seedDoc(t, s, kb, "beta")
	inRebuild, endRebuild := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.WithSearchRebuildLock(ctx, func(context.Context) error { close(inRebuild); <-endRebuild; return nil })
	}()
	<-inRebuild
	wrote := make(chan struct{}, 1)
	go func() {
		done <- s.ReplaceIndexedChunks(ctx, e.ID, 1, space, []service.Chunk{chunk(0, "beta", unit(4, 1), "beta")},
			func(context.Context, bool, bool) error { wrote <- struct{}{}; return nil })
	}()
	select {
	case <-wrote:
		t.Fatal("a commit wrote to the engine while a rebuild was beginning")
	case <-time.After(300 * time.Millisecond):
	}
	close(endRebuild)
	<-wrote
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ChunkResults says when a dropped hit's document has since committed a
// newer generation (the search should be asked again), and not for a hit
// of a generation not committed yet nor of a deleted document.
func TestChunkResultsSuperseded(t *testing.T) {
	s, ctx := searchIndexed(t, false)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "alpha")
	space := docSpace(t, s, d.ID)
	noop := func(context.Context, bool, bool) error { return nil }
	old := chunk(0, "alpha", unit(4, 1), "alpha")
	if err := s.ReplaceIndexedChunks(ctx, d.ID, 1, space, []service.Chunk{old}, noop); err != nil {
		t.Fatal(err)
	}
	uncommitted := service.SearchHit{ChunkID: newID(), DocumentID: d.ID, Generation: 2, Score: 2}
	res, superseded, err := s.ChunkResults(ctx, []service.SearchHit{uncommitted, {ChunkID: old.ID, DocumentID: d.ID, Generation: 1, Score: 1}})
	if err != nil || superseded || len(res) != 1 || res[0].ChunkID != old.ID {
		t.Fatalf("a generation not committed yet: %+v %t %v", res, superseded, err)
	}
	// The document's generation 2 commits (the row's generation is the
	// test's to set: a reindex bumps it).
	if err := s.db.Exec("UPDATE documents SET generation = 2 WHERE id = ?", int64(d.ID)).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceIndexedChunks(ctx, d.ID, 2, space, []service.Chunk{chunk(0, "alpha", unit(4, 1), "alpha")}, noop); err != nil {
		t.Fatal(err)
	}
	res, superseded, err = s.ChunkResults(ctx, []service.SearchHit{{ChunkID: old.ID, DocumentID: d.ID, Generation: 1, Score: 1}})
	if err != nil || !superseded || len(res) != 0 {
		t.Fatalf("a replaced generation's hit: %+v %t %v", res, superseded, err)
	}
	// An answer that holds the new generation too needs no second one.
	var current []service.ID
	current, _ = s.SearchChunkIDs(ctx, d.ID)
	res, superseded, err = s.ChunkResults(ctx, []service.SearchHit{{ChunkID: old.ID, DocumentID: d.ID, Generation: 1, Score: 2},
		{ChunkID: current[0], DocumentID: d.ID, Generation: 2, Score: 1}})
	if err != nil || superseded || len(res) != 1 || res[0].ChunkID != current[0] {
		t.Fatalf("an answer with both generations: %+v %t %v", res, superseded, err)
	}
	if err := s.DeleteDocument(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if _, superseded, err = s.ChunkResults(ctx, []service.SearchHit{{ChunkID: old.ID, DocumentID: d.ID, Generation: 1, Score: 1}}); err != nil || superseded {
		t.Fatalf("a deleted document's hit: %t %v", superseded, err)
	}
}
