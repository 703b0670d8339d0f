package repository

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// TestKnowledgeBaseSettingsReadsNoDocuments: the settings lookup every
// search and every ingested document makes returns the live knowledge bases
// with their settings and never reads the documents table. It runs while
// another transaction holds documents exclusively: the lookup with a
// document count (what search and ingestion called before) waits for that
// lock; this one does not.
func TestKnowledgeBaseSettingsReadsNoDocuments(t *testing.T) {
	s, ctx := migrated(t)
	a, b, gone := seedKB(t, s, 8), seedKB(t, s, 16), seedKB(t, s, 8)
	seedDoc(t, s, a, "one")
	if err := s.DeleteKnowledgeBase(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}

	tx := s.db.Begin()
	t.Cleanup(func() { tx.Rollback() })
	if err := tx.Exec("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE").Error; err != nil {
		t.Fatal(err)
	}
	// Generous: it returns at once unless it waits for the lock.
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kbs, err := s.KnowledgeBaseSettings(lctx, []service.ID{b.ID, gone.ID, a.ID, 999999})
	if err != nil {
		t.Fatalf("settings lookup while documents is locked: %v", err)
	}
	// Test ids are random: the expected order is the ids' order.
	first, second := a, b
	if b.ID < a.ID {
		first, second = b, a
	}
	if len(kbs) != 2 || kbs[0].ID != first.ID || kbs[1].ID != second.ID {
		t.Fatalf("got %v, want the two live knowledge bases in id order", kbs)
	}
	got := map[service.ID]*service.KnowledgeBase{kbs[0].ID: kbs[0], kbs[1].ID: kbs[1]}
	if got[a.ID].Name != a.Name || got[b.ID].EmbeddingDim != 16 || got[a.ID].ChunkSize != 512 || got[b.ID].VectorWeight != 1 {
		t.Errorf("settings not read: %+v %+v", got[a.ID], got[b.ID])
	}
	// The counting lookup does wait for the lock: it reads documents.
	cctx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := s.KnowledgeBasesIn(cctx, []service.ID{a.ID}, 0, 0); err == nil {
		t.Error("KnowledgeBasesIn returned while documents was locked: it no longer counts documents, so this test proves nothing")
	}
	if kbs, err := s.KnowledgeBaseSettings(ctx, nil); err != nil || len(kbs) != 0 {
		t.Errorf("no ids: %v %v", kbs, err)
	}
}

// TestBulkHelpers covers what the scale benchmark's bulk load uses around
// ReplaceChunks: dropping and rebuilding a dimension's HNSW index, the
// storage sizes, and the wait-event sampler.
func TestBulkHelpers(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 8)
	indexExists := func() bool {
		var n int
		if err := s.db.Raw("SELECT count(*) FROM pg_indexes WHERE indexname = 'chunks_embedding_8'").Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !indexExists() {
		t.Fatal("creating a knowledge base of dimension 8 made no index")
	}
	if err := s.DropVectorIndex(ctx, 8); err != nil || indexExists() {
		t.Fatalf("drop: %v, exists %v", err, indexExists())
	}
	d := seedDoc(t, s, kb, "alpha beta")
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{chunk(0, "alpha beta", unit(8, 1), "alpha", "beta")}); err != nil {
		t.Fatal(err)
	}
	if err := s.BuildVectorIndex(ctx, 8, 128); err != nil || !indexExists() {
		t.Fatalf("build: %v, exists %v", err, indexExists())
	}
	res, err := s.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Space: docSpace(t, s, d.ID), Vector: unit(8, 1), Limit: 5})
	if err != nil || len(res) != 1 {
		t.Fatalf("vector search after the rebuild: %v %v", res, err)
	}
	if err := s.DropVectorIndex(ctx, 0); !errors.Is(err, service.ErrInvalid) {
		t.Errorf("dimension 0: %v", err)
	}
	tailRows := func() (n int) {
		if err := s.db.Raw("SELECT count(*) FROM keyword_tail").Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	if tailRows() == 0 {
		t.Fatal("new postings are not in the tail: this test no longer covers settling")
	}
	if err := s.SettleKeywords(ctx); err != nil || tailRows() != 0 {
		t.Fatalf("settle: %v, %d tail rows left", err, tailRows())
	}
	if res, err := s.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Terms: ones("alpha"),
		K1: 0.9, B: 0.4, Limit: 5}); err != nil || len(res) != 1 {
		t.Fatalf("keyword search after settling: %v %v", res, err)
	}
	if err := s.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	db, tables, err := s.StorageSizes(ctx)
	if err != nil || db <= 0 || tables["chunks"] <= 0 || tables["documents"] <= 0 {
		t.Fatalf("sizes: %d %v %v", db, tables, err)
	}
	// The sampler sees another session's statement while it waits.
	tx := s.db.Begin()
	t.Cleanup(func() { tx.Rollback() })
	if err := tx.Exec("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE").Error; err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.conn(wctx).Exec("SELECT count(*) FROM documents") }()
	defer func() { cancel(); <-done }()
	for {
		waits, err := s.ActiveWaits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(waits) == 1 && strings.HasPrefix(waits[0], "Lock:relation | SELECT count(*) FROM documents") {
			return
		}
		select {
		case <-time.After(10 * time.Millisecond): // polling the server's view, not hoping
		case <-done:
			t.Fatal("the blocked statement ended")
		}
	}
}

// TestClaimDocument: the claim (now committed without waiting for its WAL
// flush) still claims once per attempt and drops stale messages.
func TestClaimDocument(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 8)
	d := seedDoc(t, s, kb, "text")
	got, err := s.ClaimDocument(ctx, d.ID, 1)
	if err != nil || got.Status != service.DocumentRunning || got.Attempts != 1 {
		t.Fatalf("claim: %+v %v", got, err)
	}
	if got, err = s.ClaimDocument(ctx, d.ID, 1); err != nil || got.Attempts != 2 {
		t.Fatalf("second attempt: %+v %v", got, err)
	}
	if _, err := s.ClaimDocument(ctx, d.ID, 2); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("another generation: %v", err)
	}
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{chunk(0, "text", unit(8, 0), "text")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimDocument(ctx, d.ID, 1); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("a ready document: %v", err)
	}
	var setting string
	if err := s.db.Raw("SHOW synchronous_commit").Scan(&setting).Error; err != nil || setting != "on" {
		t.Errorf("synchronous_commit is %q after claims (%v): the claim's setting must stay in its transaction", setting, err)
	}
}
