package repository

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// migrated returns a Store on a fresh, migrated database, and the test's
// context for calling it.
func migrated(t *testing.T) (*Store, context.Context) {
	t.Helper()
	s := openTest(t, testenv.FreshDatabase(t))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, t.Context()
}

// outboxRows counts the outbox rows that match where (SQL, with args).
func outboxRows(t *testing.T, s *Store, where string, args ...any) int {
	t.Helper()
	var n int
	if err := s.db.Raw("SELECT count(*) FROM outbox WHERE "+where, args...).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// newID returns a random id: every test has its own database, and random ids
// need no counter shared between tests.
func newID() service.ID { return service.ID(rand.Int64N(1<<62) + 1) }

func seedKB(t *testing.T, s *Store, dim int) *service.KnowledgeBase {
	t.Helper()
	id := newID()
	kb := &service.KnowledgeBase{ID: id, Name: fmt.Sprint("kb", id), EmbeddingModel: "m", EmbeddingDim: dim,
		ChunkSize: 512, ChunkOverlap: 64, VectorWeight: 1}
	if err := s.CreateKnowledgeBase(context.Background(), kb); err != nil {
		t.Fatal(err)
	}
	return kb
}

// seedUser creates a local user (role user) named username.
func seedUser(t *testing.T, s *Store, username string) *service.User {
	t.Helper()
	u := &service.User{ID: newID(), Username: username, PasswordHash: "x", Role: service.RoleUser}
	if err := s.CreateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

func seedDoc(t *testing.T, s *Store, kb *service.KnowledgeBase, content string) *service.Document {
	t.Helper()
	id := newID()
	d := &service.Document{ID: id, KnowledgeBaseID: kb.ID, Name: "doc.txt", Mime: "text/plain",
		Size: int64(len(content)), SHA256: fmt.Sprintf("%064x", int64(id))}
	msg := service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: d.ID.String() + ":1", Payload: []byte("{}")}
	if err := s.CreateUpload(context.Background(), d, []byte(content), msg); err != nil {
		t.Fatal(err)
	}
	return d
}

// unit returns a unit vector of dim with 1 at position i.
func unit(dim, i int) []float32 {
	v := make([]float32, dim)
	v[i%dim] = 1
	return v
}

func chunk(ordinal int, content string, vec []float32, terms ...string) service.Chunk {
	tf := map[string]int{}
	for _, term := range terms {
		tf[term]++
	}
	return service.Chunk{ID: newID(), Ordinal: ordinal, Content: content, TokenCount: len(terms),
		Embedding: vec, Terms: tf, TermCount: len(terms)}
}

func TestUploadDuplicateIsConflictWithDocumentID(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "hello")
	dup := &service.Document{ID: newID(), KnowledgeBaseID: kb.ID, Name: "again.txt", Mime: "text/plain", Size: 5, SHA256: d.SHA256}
	err := s.CreateUpload(ctx, dup, []byte("hello"), service.OutboxMessage{ID: newID(), Topic: "t", Key: "k", Payload: []byte("{}")})
	var de *service.Error
	if !errors.Is(err, service.ErrConflict) || !errors.As(err, &de) || de.Details["documentId"] != d.ID.String() {
		t.Fatalf("duplicate upload: %v, want conflict with documentId %s", err, d.ID)
	}
	// The failed upload left no outbox row behind.
	if n := outboxRows(t, s, "true"); n != 1 {
		t.Fatalf("%d outbox rows, want 1", n)
	}
}

func TestReplaceChunksAndSearch(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	other := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "x")
	o := seedDoc(t, s, other, "y")

	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{
		chunk(0, "vpn setup guide", unit(4, 0), "vpn", "setup", "guid"),
		chunk(1, "printer driver", unit(4, 1), "printer", "driver"),
		chunk(2, "vpn vpn troubleshooting", unit(4, 2), "vpn", "vpn", "troubleshoot"),
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceChunks(ctx, o.ID, 1, docSpace(t, s, o.ID), []service.Chunk{chunk(0, "vpn elsewhere", unit(4, 0), "vpn", "elsewher")}); err != nil {
		t.Fatal(err)
	}

	got, err := s.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Terms: ones("vpn"), K1: 0.9, B: 0.4, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Content != "vpn vpn troubleshooting" || got[0].DocumentName != "doc.txt" {
		t.Fatalf("keyword results %+v", got)
	}
	// BM25 by hand for the top hit: N=3, df=2, tf=2, dl=3, avgdl=8/3.
	idf := math.Log(1 + (3-2+0.5)/(2+0.5))
	want := idf * 2 * 1.9 / (2 + 0.9*(1-0.4+0.4*3/(8.0/3)))
	if math.Abs(got[0].Score-want) > 1e-9 {
		t.Fatalf("bm25 score %v, want %v", got[0].Score, want)
	}

	vec, err := s.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Space: kb.Space().Key(), Vector: unit(4, 1), Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(vec) != 2 || vec[0].Content != "printer driver" || math.Abs(vec[0].Score-1) > 1e-3 {
		t.Fatalf("vector results %+v", vec)
	}

	doc, _ := s.Document(ctx, d.ID)
	if doc.Status != service.DocumentReady || doc.ChunkCount != 3 {
		t.Fatalf("document after replace: %+v", doc)
	}

	// A stale generation is refused and changes nothing.
	if err := s.ReplaceChunks(ctx, d.ID, 7, docSpace(t, s, d.ID), nil); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("stale generation: %v", err)
	}
	// Deleting the document removes it from search and from the statistics.
	if err := s.DeleteDocument(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	got, _ = s.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb.ID, other.ID}, Terms: ones("vpn"), K1: 0.9, B: 0.4, Limit: 10})
	if len(got) != 1 || got[0].Content != "vpn elsewhere" {
		t.Fatalf("after delete: %+v", got)
	}
	var stats struct{ ChunkTotal, TermTotal int64 }
	if err := s.db.Raw("SELECT sum(chunks) AS chunk_total, sum(terms) AS term_total FROM keyword_stats WHERE kb_id = ?",
		int64(kb.ID)).Scan(&stats).Error; err != nil {
		t.Fatal(err)
	}
	if stats.ChunkTotal != 0 || stats.TermTotal != 0 {
		t.Fatalf("stats after delete %+v", stats)
	}
}

// Searches running while a document is reindexed and the keyword index
// compacted see the old chunks or the new ones, never a mix and never
// nothing.
func TestReindexIsAtomicForReaders(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "x")
	gen := func(g, n int) []service.Chunk {
		out := make([]service.Chunk, n)
		for i := range out {
			out[i] = chunk(i, fmt.Sprintf("gen%d part %d", g, i), unit(4, i), "shared", fmt.Sprintf("gen%d", g))
		}
		return out
	}
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), gen(1, 5)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var (
		wg  sync.WaitGroup
		bad []string
		mu  sync.Mutex
	)
	report := func(msg string) {
		mu.Lock()
		bad = append(bad, msg)
		mu.Unlock()
	}
	// repeat runs step until stop, or until it returns false.
	repeat := func(step func() bool) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !step() {
					return
				}
			}
		})
	}
	for w := 0; w < 3; w++ {
		repeat(func() bool {
			res, err := s.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Terms: ones("shared"), K1: 0.9, B: 0.4, Limit: 50})
			if err != nil {
				report(err.Error())
				return false
			}
			gens := map[string]bool{}
			for _, r := range res {
				gens[r.Content[:4]] = true
			}
			if len(res) == 0 || len(gens) != 1 {
				report(fmt.Sprintf("%d results from generations %v", len(res), gens))
			}
			return true
		})
	}
	// The compactor moves postings between the tail and blocks meanwhile:
	// readers see each move whole, in their snapshot.
	repeat(func() bool {
		if _, err := s.CompactKeywords(ctx, 1); err != nil {
			report("compaction: " + err.Error())
			return false
		}
		return true
	})
	for g := 2; g <= 6; g++ {
		doc, err := s.Reindex(ctx, d.ID, func(doc *service.Document) service.OutboxMessage {
			return service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: fmt.Sprint(doc.ID, ":", doc.Generation), Payload: []byte("{}")}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReplaceChunks(ctx, d.ID, doc.Generation, docSpace(t, s, d.ID), gen(doc.Generation, 3+g)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("readers saw %d inconsistent results, first: %s", len(bad), bad[0])
	}
}

func TestRelayOutbox(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	seedDoc(t, s, kb, "a")
	seedDoc(t, s, kb, "b")
	seedDoc(t, s, kb, "c")

	failing := func(context.Context, service.OutboxMessage) (string, error) { return "", errors.New("mq down") }
	sent, failed, err := s.RelayIngest(ctx, 100, 10, failing)
	if err != nil || sent != 0 || failed != 1 {
		t.Fatalf("relay with MQ down: sent %d failed %d err %v", sent, failed, err)
	}
	var keys []string
	ok := func(_ context.Context, m service.OutboxMessage) (string, error) {
		keys = append(keys, m.Key)
		return "", nil
	}
	sent, _, err = s.RelayIngest(ctx, 100, 10, ok)
	if err != nil || sent != 3 || len(keys) != 3 {
		t.Fatalf("relay: sent %d keys %v err %v", sent, keys, err)
	}
	sent, _, _ = s.RelayIngest(ctx, 100, 10, ok)
	if sent != 0 {
		t.Fatalf("relayed %d rows twice", sent)
	}
}

func TestPruneOutbox(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	for _, c := range []string{"a", "b", "c", "d", "e"} {
		seedDoc(t, s, kb, c)
	}
	// Three of the five rows are sent; two stay unsent (the MQ went down).
	n := 0
	sent, _, err := s.RelayIngest(ctx, 100, 10, func(context.Context, service.OutboxMessage) (string, error) {
		if n++; n > 3 {
			return "", errors.New("mq down")
		}
		return "", nil
	})
	if err != nil || sent != 3 {
		t.Fatalf("relay: sent %d, err %v", sent, err)
	}

	// Rows sent after the cutoff stay.
	if got, err := s.PruneOutbox(ctx, time.Now().Add(-time.Hour), 10); err != nil || got != 0 {
		t.Fatalf("prune before anything is old enough: deleted %d, err %v", got, err)
	}
	// A cutoff in the future makes every sent row old enough; the limit
	// bounds each batch.
	future := time.Now().Add(time.Hour)
	if got, err := s.PruneOutbox(ctx, future, 2); err != nil || got != 2 {
		t.Fatalf("first batch: deleted %d, err %v; want 2", got, err)
	}
	if got, err := s.PruneOutbox(ctx, future, 2); err != nil || got != 1 {
		t.Fatalf("second batch: deleted %d, err %v; want 1", got, err)
	}
	if got, err := s.PruneOutbox(ctx, future, 2); err != nil || got != 0 {
		t.Fatalf("third batch: deleted %d, err %v; want 0", got, err)
	}
	if sentLeft, unsent := outboxRows(t, s, "sent_at IS NOT NULL"), outboxRows(t, s, "sent_at IS NULL"); sentLeft != 0 || unsent != 2 {
		t.Fatalf("after pruning: %d sent and %d unsent rows, want 0 and 2", sentLeft, unsent)
	}
}

// docSpace is the key of the recorded embedding space of a document's
// knowledge base: the space ReplaceChunks writes vectors in.
func docSpace(t testing.TB, s *Store, docID service.ID) string {
	t.Helper()
	var space string
	if err := s.db.Raw(`SELECT kb.embedding_space FROM knowledge_bases kb JOIN documents d ON d.kb_id = kb.id WHERE d.id = ?`,
		int64(docID)).Scan(&space).Error; err != nil || space == "" {
		t.Fatalf("space of document %d: %q %v", docID, space, err)
	}
	return space
}
