package repository

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// outboxTopics counts the outbox rows of topic.
func outboxTopics(t *testing.T, s *Store, topic string) int {
	t.Helper()
	var n int
	if err := s.db.Raw("SELECT count(*) FROM outbox WHERE topic = ?", topic).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// With a search engine, committed chunks leave the document running with
// a search-index message queued; the reaper's stuck-document scan leaves it
// alone; SearchIndexed makes it ready only for the state it mirrored; a
// delete queues the removal.
func TestSearchIndexLifecycle(t *testing.T) {
	s, ctx := migrated(t)
	s.UseSearchIndex(func() (service.ID, error) { return newID(), nil }, true)
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

	res, err := s.ChunkResults(ctx, []service.SearchResult{{ChunkID: newID(), Score: 3}, {ChunkID: c.ID, Score: 2}})
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
	s.UseSearchIndex(func() (service.ID, error) { return newID(), nil }, true)
	if n, err := s.RequeueSearchIndex(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("requeue: %d %v", n, err)
	}
}

// A replace's message lists the chunks it removed; SearchFailed fails the
// running generation with its reason and stops the reaper's re-queue.
func TestSearchIndexRemovedAndFailed(t *testing.T) {
	s, ctx := migrated(t)
	s.UseSearchIndex(func() (service.ID, error) { return newID(), nil }, false)
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
