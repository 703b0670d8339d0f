package repository

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/migrations"
	"github.com/ragent-go/ragent/service"
)

// migrateBefore applies the migrations that sort before version, as an
// older release did.
func migrateBefore(t *testing.T, s *Store, version string) {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	if err := s.db.Exec(`CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`).Error; err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		v := strings.TrimSuffix(name, ".sql")
		if v >= version {
			break
		}
		body, _ := fs.ReadFile(migrations.FS, name)
		if err := s.db.Exec(string(body)).Error; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.db.Exec(`INSERT INTO schema_migrations (version) VALUES (?)`, v).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// upgraded returns a store whose database was at the schema before version
// and held the rows seed writes, then migrated to the current schema: what
// a release that adds migration version meets.
func upgraded(t *testing.T, version string, seed ...string) *Store {
	t.Helper()
	s := openTest(t, testenv.FreshDatabase(t))
	migrateBefore(t, s, version)
	for _, sql := range seed {
		if err := s.db.Exec(sql).Error; err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Migration 0009 upgrades a database with knowledge bases and chunks: each
// gets the key of the space it was embedded in (the model and dimension,
// no prefixes), which Go computes the same way, so the old vectors stay
// searchable.
func TestMigration0009KeepsVectorsSearchable(t *testing.T) {
	s := upgraded(t, "0009",
		`INSERT INTO knowledge_bases (id, name, embedding_model, embedding_dim) VALUES (1, 'old', 'text-embed-v2', 4)`,
		`INSERT INTO document_blobs (sha256, bytes, size) VALUES ('aa', 'x', 1)`,
		`INSERT INTO documents (id, kb_id, name, mime, size, sha256, status, chunk_count) VALUES (2, 1, 'd', 'text/plain', 1, 'aa', 'ready', 1)`,
		`CREATE INDEX chunks_embedding_4 ON chunks USING hnsw ((embedding::halfvec(4)) halfvec_cosine_ops) WHERE embedding_dim = 4`,
		`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, token_count, term_count, embedding, embedding_dim)
		VALUES (3, 2, 1, 1, 0, 'old chunk', 2, 2, '[1,0,0,0]', 4)`)
	ctx := context.Background()
	kb, err := s.KnowledgeBase(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := service.EmbeddingSpace{Model: "text-embed-v2", Dim: 4}
	if kb.Space() != want || kb.Reembedding != nil {
		t.Fatalf("space %+v reembedding %+v, want %+v", kb.Space(), kb.Reembedding, want)
	}
	var keys []string
	if err := s.db.Raw(`SELECT embedding_space FROM knowledge_bases UNION ALL SELECT embedding_space FROM chunks`).Scan(&keys).Error; err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != want.Key() || keys[1] != want.Key() {
		t.Fatalf("space keys %v, want %s twice", keys, want.Key())
	}
	found, err := s.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{1}, Space: want.Key(), Vector: []float32{1, 0, 0, 0}, Limit: 5})
	if err != nil || len(found) != 1 {
		t.Fatalf("vector search after the upgrade: %v %v", found, err)
	}
	other := service.EmbeddingSpace{Model: "another", Dim: 4}.Key()
	if found, _ := s.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{1}, Space: other, Vector: []float32{1, 0, 0, 0}, Limit: 5}); len(found) != 0 {
		t.Fatalf("a vector of another space of the same dimension matched: %v", found)
	}
}

// The storage side of a re-embedding: planning queues one message per
// document with chunks, a document re-indexed meanwhile writes its vectors
// for the target, the switch waits for the last document, and after it no
// chunk keeps a vector of the old space (one whose document never got new
// ones loses its vector rather than keep an old one).
func TestReembedStorage(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	a, b, c := seedDoc(t, s, kb, "a"), seedDoc(t, s, kb, "b"), seedDoc(t, s, kb, "c")
	old := docSpace(t, s, a.ID)
	for _, d := range []*service.Document{a, b, c} {
		if err := s.ReplaceChunks(ctx, d.ID, 1, old, []service.Chunk{chunk(0, "text of "+d.ID.String(), unit(4, 0), "text")}); err != nil {
			t.Fatal(err)
		}
	}
	target := service.EmbeddingSpace{Model: "next", Dim: 4, QueryPrefix: "query: ", DocumentPrefix: "passage: "}
	var msgs []service.OutboxMessage
	plan := func() []service.ID {
		moving, err := s.PlanReembed(ctx, target, func(d *service.Document) (service.OutboxMessage, error) {
			m := service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: d.ID.String() + ":reembed", Payload: []byte("{}")}
			msgs = append(msgs, m)
			return m, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return moving
	}
	if moving := plan(); len(moving) != 1 || moving[0] != kb.ID || len(msgs) != 3 {
		t.Fatalf("moving %v with %d messages", moving, len(msgs))
	}
	if plan(); len(msgs) != 3 {
		t.Fatalf("planning again queued %d more messages", len(msgs)-3)
	}

	// a is re-embedded.
	todo, err := s.ReembedChunks(ctx, a.ID, target.Key())
	if err != nil || len(todo) != 1 {
		t.Fatalf("chunks to re-embed: %v %v", todo, err)
	}
	todo[0].Embedding = unit(4, 1)
	if err := s.StoreReembedded(ctx, a.ID, target.Key(), todo); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.ReembedChunks(ctx, a.ID, target.Key()); len(again) != 0 {
		t.Fatal("a document done is offered again")
	}
	// b is re-indexed: its new chunks are embedded for the target.
	if err := s.ReplaceChunks(ctx, b.ID, 1, old, nil); !errors.Is(err, ErrSpaceChanged) {
		t.Fatalf("vectors of the old space during the move: %v, want ErrSpaceChanged", err)
	}
	if err := s.ReplaceChunks(ctx, b.ID, 1, target.Key(), []service.Chunk{chunk(0, "new b", unit(4, 2), "new")}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.KnowledgeBase(ctx, kb.ID)
	if got.Reembedding == nil || got.Reembedding.Done != 2 || got.Reembedding.Total != 3 || got.Reembedding.Target != target {
		t.Fatalf("progress %+v", got.Reembedding)
	}
	// Meanwhile search stays in the recorded space and finds every chunk
	// that has a vector there (the re-indexed b has none yet).
	found, err := s.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Space: old, Vector: unit(4, 0), Limit: 10})
	if err != nil || len(found) != 2 {
		t.Fatalf("old-space search during the move: %d results, %v", len(found), err)
	}
	if done, err := s.FinishReembed(ctx, kb.ID, target.Key()); err != nil || done {
		t.Fatalf("switched with a document left: %v %v", done, err)
	}
	// c fails for good before its turn: it keeps chunks without a new
	// vector, and the switch leaves them to keyword search.
	if err := s.db.Exec(`UPDATE documents SET reembedded_space = ? WHERE id = ?`, target.Key(), int64(c.ID)).Error; err != nil {
		t.Fatal(err)
	}
	if done, err := s.FinishReembed(ctx, kb.ID, target.Key()); err != nil || !done {
		t.Fatalf("switch: %v %v", done, err)
	}
	got, _ = s.KnowledgeBase(ctx, kb.ID)
	if got.Space() != target || got.Reembedding != nil {
		t.Fatalf("after the switch: %+v %+v", got.Space(), got.Reembedding)
	}
	var stale int64
	if err := s.db.Raw(`SELECT count(*) FROM chunks WHERE kb_id = ? AND (next_embedding IS NOT NULL
		OR (embedding IS NOT NULL AND embedding_space <> ?) OR (embedding IS NULL AND embedding_space <> ''))`,
		int64(kb.ID), target.Key()).Scan(&stale).Error; err != nil || stale != 0 {
		t.Fatalf("%d chunks with a vector of the old space or a pending one (%v)", stale, err)
	}
	found, err = s.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Space: target.Key(), Vector: unit(4, 1), Limit: 10})
	if err != nil || len(found) != 2 {
		t.Fatalf("new-space search: %d results (a and b), %v", len(found), err)
	}
}
