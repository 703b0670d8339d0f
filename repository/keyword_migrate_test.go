package repository

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/pgvector/pgvector-go"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/repository/keyword"
	"github.com/ragent-go/ragent/service"
)

// oldKeywordSQL is the keyword search before migration 0007: every posting
// of every query term scored, df counted per query by a window function.
// The statistics CTE is a parameter: knowledge_bases' counters at schema
// 0006, keyword_stats afterwards (for the benchmark).
const oldKeywordSQL = `
WITH q AS (
	SELECT * FROM unnest(?::text[], ?::int[]) AS q(term, qtf)
), st AS (%s
), postings AS (
	SELECT ct.term, ct.chunk_id, ct.tf, ct.dl, count(*) OVER (PARTITION BY ct.term)::float8 AS df
	FROM chunk_terms ct WHERE ct.term = ANY(?) AND ct.kb_id = ANY(?)
), scored AS (
	SELECT p.chunk_id,
	       sum(q.qtf * ln(1 + (st.n - p.df + 0.5) / (p.df + 0.5))
	           * p.tf * (?::float8 + 1) / (p.tf + ?::float8 * (1 - ?::float8 + ?::float8 * p.dl / greatest(st.avgdl, 1)))) AS score
	FROM postings p JOIN q ON q.term = p.term CROSS JOIN st
	GROUP BY p.chunk_id ORDER BY score DESC, p.chunk_id LIMIT ?
)
SELECT s.chunk_id, c.document_id, d.name AS document_name, c.kb_id, c.content, c.section, s.score
FROM scored s JOIN chunks c ON c.id = s.chunk_id JOIN documents d ON d.id = c.document_id
ORDER BY s.score DESC, s.chunk_id`

const oldStats0006 = `
	SELECT coalesce(sum(chunk_total), 0)::float8 AS n,
	       coalesce(sum(term_total), 0)::float8 / greatest(coalesce(sum(chunk_total), 0), 1) AS avgdl
	FROM knowledge_bases WHERE id = ANY(?) AND deleted_at IS NULL`

func oldKeywordSearch(t testing.TB, s *Store, stats string, q service.KeywordQuery) []service.SearchResult {
	t.Helper()
	var terms textArray
	var counts []int
	for _, t := range q.Terms {
		terms, counts = append(terms, t.Term), append(counts, t.Count)
	}
	kbs := idArray(q.KnowledgeBaseIDs)
	var rows []searchRow
	if err := s.db.Raw(fmt.Sprintf(oldKeywordSQL, stats), terms, countArray(counts), kbs, terms, kbs,
		q.K1, q.K1, q.B, q.B, q.Limit).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := make([]service.SearchResult, len(rows))
	for i, r := range rows {
		out[i] = r.result()
	}
	return out
}

func countArray(ns []int) intArray {
	out := make(intArray, len(ns))
	for i, n := range ns {
		out[i] = int64(n)
	}
	return out
}

// oldKB and oldDoc write a knowledge base and a ready document in the
// columns schema 0006 has (the store's own writes know later columns).
func oldKB(t *testing.T, s *Store) *service.KnowledgeBase {
	t.Helper()
	kb := &service.KnowledgeBase{ID: newID(), EmbeddingModel: "m", EmbeddingDim: 4}
	if err := s.db.Exec(`INSERT INTO knowledge_bases (id, name, embedding_model, embedding_dim) VALUES (?, ?, 'm', 4)`,
		int64(kb.ID), fmt.Sprint("kb", kb.ID)).Error; err != nil {
		t.Fatal(err)
	}
	return kb
}

func oldDoc(t *testing.T, s *Store, kb *service.KnowledgeBase) *service.Document {
	t.Helper()
	d := &service.Document{ID: newID(), KnowledgeBaseID: kb.ID}
	sha := fmt.Sprintf("%064x", int64(d.ID))
	if err := s.db.Exec(`INSERT INTO document_blobs (sha256, bytes, size) VALUES (?, 'x', 1) ON CONFLICT DO NOTHING`, sha).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.db.Exec(`INSERT INTO documents (id, kb_id, name, mime, size, sha256, status, generation)
		VALUES (?, ?, 'doc.txt', 'text/plain', 1, ?, 'ready', 1)`, int64(d.ID), int64(kb.ID), sha).Error; err != nil {
		t.Fatal(err)
	}
	return d
}

// oldReplaceChunks writes chunks the way schema 0006's ReplaceChunks did.
func oldReplaceChunks(t *testing.T, s *Store, kb service.ID, doc service.ID, chunks []service.Chunk) {
	t.Helper()
	var total int
	for _, c := range chunks {
		if err := s.db.Exec(`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, section,
			token_count, term_count, embedding, embedding_dim) VALUES (?, ?, ?, 1, ?, ?, '', ?, ?, ?, ?)`,
			int64(c.ID), int64(doc), int64(kb), c.Ordinal, c.Content, c.TokenCount, c.TermCount,
			pgvector.NewHalfVector(c.Embedding), len(c.Embedding)).Error; err != nil {
			t.Fatal(err)
		}
		for term, tf := range c.Terms {
			if err := s.db.Exec("INSERT INTO chunk_terms (term, kb_id, chunk_id, tf, dl) VALUES (?, ?, ?, ?, ?)",
				term, int64(kb), int64(c.ID), tf, c.TermCount).Error; err != nil {
				t.Fatal(err)
			}
		}
		total += c.TermCount
	}
	if err := s.db.Exec("UPDATE knowledge_bases SET chunk_total = chunk_total + ?, term_total = term_total + ? WHERE id = ?",
		len(chunks), total, int64(kb)).Error; err != nil {
		t.Fatal(err)
	}
}

// Migration 0007 turns a schema-0006 database with data into the block
// index in place: every query answers as before, the blocks it builds in
// SQL are byte for byte what the Go encoder writes, and the migrated index
// takes removals, new chunks and compaction.
func TestMigrateKeywordIndexInPlace(t *testing.T) {
	s := openTest(t, testenv.FreshDatabase(t))
	ctx := context.Background()
	migrateBefore(t, s, "0007")
	rng := rand.New(rand.NewSource(7))
	zipf := rand.NewZipf(rng, 1.2, 2, 500)
	ref := &refIndex{chunks: map[service.ID]refChunk{}}
	kbs := []*service.KnowledgeBase{oldKB(t, s), oldKB(t, s)}
	var docs []*service.Document
	for i := 0; i < 250; i++ {
		kb := kbs[i%2]
		d := oldDoc(t, s, kb)
		docs = append(docs, d)
		cs := make([]service.Chunk, 1+rng.Intn(3))
		for j := range cs {
			terms := []string{"the"}
			for k := 2 + rng.Intn(30); k > 0; k-- {
				terms = append(terms, fmt.Sprintf("w%d", zipf.Uint64()))
			}
			cs[j] = chunk(j, "c", unit(4, j), terms...)
			ref.chunks[cs[j].ID] = refChunk{kb: kb.ID, tf: cs[j].Terms, dl: cs[j].TermCount}
		}
		oldReplaceChunks(t, s, kb.ID, d.ID, cs)
	}
	var queries []service.KeywordQuery
	for i := 0; i < 30; i++ {
		terms := []string{"the"}
		if i%3 != 0 {
			terms = distinctSorted(sortedCopy([]string{fmt.Sprintf("w%d", zipf.Uint64()), fmt.Sprintf("w%d", zipf.Uint64()), "the"}))
		}
		chosen := []service.ID{kbs[i%2].ID}
		if i%4 == 0 {
			chosen = []service.ID{kbs[0].ID, kbs[1].ID}
		}
		counts := make([]int, len(terms))
		for j := range counts {
			counts[j] = 1
		}
		queries = append(queries, service.KeywordQuery{KnowledgeBaseIDs: chosen, Terms: termCounts(terms, counts), K1: 1.2, B: 0.75, Limit: 10})
	}
	before := make([][]service.SearchResult, len(queries))
	for i, q := range queries {
		before[i] = oldKeywordSearch(t, s, oldStats0006, q)
		if len(before[i]) == 0 {
			t.Fatalf("query %v found nothing at 0006", q.Terms)
		}
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i, q := range queries {
		got, err := s.KeywordSearch(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(before[i]) {
			t.Fatalf("query %v: %d results after, %d before", q.Terms, len(got), len(before[i]))
		}
		checkSame(t, fmt.Sprintf("migrated %v", q.Terms), ref, q, got)
		for j := range got {
			// Exact ties may come in either order (the old SQL summed in
			// hash order, so even it was not stable in the last bit).
			tie := j+1 < len(got) && closeTo(got[j].Score, got[j+1].Score) || j > 0 && closeTo(got[j].Score, got[j-1].Score)
			if !tie && (got[j].ChunkID != before[i][j].ChunkID || got[j].Content != before[i][j].Content) || !closeTo(got[j].Score, before[i][j].Score) {
				t.Fatalf("query %v #%d: chunk %d at %v after, chunk %d at %v before", q.Terms, j,
					got[j].ChunkID, got[j].Score, before[i][j].ChunkID, before[i][j].Score)
			}
		}
	}
	if full := checkBlocks(t, s); full == 0 {
		t.Fatal("no full block: the corpus is too small to test blocking")
	}
	checkDocTerms(t, s, ref)
	checkBlocksInline(t, s, "migrated")

	// The migrated index keeps working: removals of migrated chunks, new
	// chunks, compaction.
	for i, d := range docs {
		if i%5 != 0 {
			continue
		}
		var ids []int64
		if err := s.db.Raw("SELECT id FROM chunks WHERE document_id = ?", int64(d.ID)).Scan(&ids).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteDocument(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			delete(ref.chunks, service.ID(id))
		}
	}
	d := seedDoc(t, s, kbs[0], "new")
	c := chunk(0, "c", unit(4, 0), "the", "the", "w2")
	ref.chunks[c.ID] = refChunk{kb: kbs[0].ID, tf: c.Terms, dl: c.TermCount}
	if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{c}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		for _, q := range queries {
			got, err := s.KeywordSearch(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, fmt.Sprintf("migrated, round %d, %v", round, q.Terms), ref, q, got)
		}
		for more := true; more; {
			var err error
			if more, err = s.CompactKeywords(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkBlocksInline(t, s, "compacted after the migration")
}

// checkBlocksInline fails unless keyword_blocks keeps every value in its
// own pages (migration 0012): after a VACUUM, which frees the old row
// versions' TOAST values and truncates the emptied TOAST table, nothing is
// left there.
func checkBlocksInline(t *testing.T, s *Store, when string) {
	t.Helper()
	if err := s.db.Exec("VACUUM keyword_blocks").Error; err != nil {
		t.Fatal(err)
	}
	var toast int64
	if err := s.db.Raw("SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'keyword_blocks'::regclass").Scan(&toast).Error; err != nil {
		t.Fatal(err)
	}
	if toast != 0 {
		t.Fatalf("%s: keyword_blocks' TOAST table holds %d bytes", when, toast)
	}
}

// checkBlocks fails unless every block's head is what the Go encoder writes
// for its payload (blocks built in SQL must agree), and returns the number
// of full blocks.
func checkBlocks(t *testing.T, s *Store) (full int) {
	t.Helper()
	var blocks []struct {
		Head, Payload []byte
	}
	if err := s.db.Raw("SELECT head, payload FROM keyword_blocks").Scan(&blocks).Error; err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		ps, err := keyword.DecodePostings(b.Payload)
		if err != nil {
			t.Fatal(err)
		}
		head, _ := keyword.EncodeBlock(ps)
		if !bytes.Equal(head, b.Head) {
			t.Fatalf("stored head %x, the Go encoder writes %x", b.Head, head)
		}
		if len(ps) == keyword.BlockSize {
			full++
		}
	}
	return full
}

// checkDocTerms checks that keyword_docs lists, for every chunk of ref, its
// distinct terms as one space-separated string (migration 0011).
func checkDocTerms(t *testing.T, s *Store, ref *refIndex) {
	t.Helper()
	var rows []struct {
		ChunkID int64
		Terms   string
	}
	if err := s.db.Raw("SELECT chunk_id, terms FROM keyword_docs").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(ref.chunks) {
		t.Fatalf("keyword_docs has %d chunks, the reference %d", len(rows), len(ref.chunks))
	}
	for _, r := range rows {
		c, ok := ref.chunks[service.ID(r.ChunkID)]
		if !ok {
			t.Fatalf("keyword_docs lists chunk %d, which the reference does not have", r.ChunkID)
		}
		var want []string
		for term := range c.tf {
			want = append(want, term)
		}
		got := sortedCopy(strings.Fields(r.Terms))
		if strings.Join(got, " ") != strings.Join(sortedCopy(want), " ") || len(got) != len(want) {
			t.Fatalf("chunk %d: keyword_docs terms %q, want %q", r.ChunkID, r.Terms, sortedCopy(want))
		}
	}
}
