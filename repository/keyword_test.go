package repository

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/ragent-go/ragent/repository/keyword"
	"github.com/ragent-go/ragent/service"
)

// refIndex is an independent, exhaustive BM25 over the live chunks, the
// reference the block-max search must equal.
type refIndex struct {
	chunks map[service.ID]refChunk
}

type refChunk struct {
	kb service.ID
	tf map[string]int
	dl int
}

type refHit struct {
	id    service.ID
	score float64
}

func (r *refIndex) search(q service.KeywordQuery) []refHit {
	inKB := map[service.ID]bool{}
	for _, kb := range q.KnowledgeBaseIDs {
		inKB[kb] = true
	}
	var n, total float64
	df := make([]float64, len(q.Terms))
	for _, c := range r.chunks {
		if !inKB[c.kb] {
			continue
		}
		n++
		total += float64(c.dl)
		for i, t := range q.Terms {
			if c.tf[t.Term] > 0 {
				df[i]++
			}
		}
	}
	avgdl := math.Max(total/math.Max(n, 1), 1)
	var hits []refHit
	for id, c := range r.chunks {
		if !inKB[c.kb] {
			continue
		}
		score, any := 0.0, false
		for i, t := range q.Terms {
			tf := float64(c.tf[t.Term])
			if tf == 0 {
				continue
			}
			any = true
			idf := math.Log(1 + (n-df[i]+0.5)/(df[i]+0.5))
			score += float64(t.Count) * idf * tf * (q.K1 + 1) / (tf + q.K1*(1-q.B+q.B*float64(c.dl)/avgdl))
		}
		if any {
			hits = append(hits, refHit{id, score})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].score != hits[j].score {
			return hits[i].score > hits[j].score
		}
		return hits[i].id < hits[j].id
	})
	return hits[:min(len(hits), q.Limit)]
}

// scoreOf is the reference score of one chunk (0 if it matches nothing).
func (r *refIndex) scoreOf(q service.KeywordQuery, id service.ID) (float64, bool) {
	for _, h := range r.search(service.KeywordQuery{KnowledgeBaseIDs: q.KnowledgeBaseIDs, Terms: q.Terms,
		K1: q.K1, B: q.B, Limit: math.MaxInt32}) {
		if h.id == id {
			return h.score, true
		}
	}
	return 0, false
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// checkSame fails unless got equals the reference's top k up to exact ties:
// the same scores position by position, and a different chunk only where
// its own reference score ties the reference's.
func checkSame(t *testing.T, label string, ref *refIndex, q service.KeywordQuery, got []service.SearchResult) {
	t.Helper()
	want := ref.search(q)
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", label, len(got), len(want))
	}
	seen := map[service.ID]bool{}
	for i, g := range got {
		if seen[g.ChunkID] {
			t.Fatalf("%s: chunk %d twice", label, g.ChunkID)
		}
		seen[g.ChunkID] = true
		if !closeTo(g.Score, want[i].score) {
			t.Fatalf("%s: #%d scores %.15g (chunk %d), want %.15g (chunk %d)", label, i, g.Score, g.ChunkID, want[i].score, want[i].id)
		}
		if g.ChunkID != want[i].id {
			own, ok := ref.scoreOf(q, g.ChunkID)
			if !ok || !closeTo(own, want[i].score) {
				t.Fatalf("%s: #%d is chunk %d (reference score %v, live %v), want chunk %d at %v", label, i, g.ChunkID, own, ok, want[i].id, want[i].score)
			}
		}
	}
}

// The block-max search returns exhaustive BM25's top k on random corpora:
// a Zipf vocabulary plus terms in most chunks (many blocks each), several
// knowledge bases, tail only, blocks only and mixes, removed and reindexed
// documents before and after compaction.
func TestKeywordSearchExact(t *testing.T) {
	s, ctx := migrated(t)
	rng := rand.New(rand.NewSource(12))
	kbs := []*service.KnowledgeBase{seedKB(t, s, 4), seedKB(t, s, 4), seedKB(t, s, 4)}
	ref := &refIndex{chunks: map[service.ID]refChunk{}}
	zipf := rand.NewZipf(rng, 1.15, 2, 3000)
	word := func() string { return fmt.Sprintf("w%d", zipf.Uint64()) }
	makeChunks := func(kb *service.KnowledgeBase, n int) []service.Chunk {
		out := make([]service.Chunk, n)
		for i := range out {
			var terms []string
			for j := 3 + rng.Intn(40); j > 0; j-- {
				terms = append(terms, word())
			}
			if rng.Float64() < 0.9 {
				for j := 1 + rng.Intn(3); j > 0; j-- {
					terms = append(terms, "the")
				}
			}
			if rng.Float64() < 0.5 {
				terms = append(terms, "half")
			}
			out[i] = chunk(i, "c", unit(4, i), terms...)
			ref.chunks[out[i].ID] = refChunk{kb: kb.ID, tf: out[i].Terms, dl: out[i].TermCount}
		}
		return out
	}
	type docRef struct {
		doc    *service.Document
		kb     *service.KnowledgeBase
		chunks []service.Chunk
	}
	var docs []*docRef
	ingest := func(n int) {
		for i := 0; i < n; i++ {
			kb := kbs[rng.Intn(len(kbs))]
			d := seedDoc(t, s, kb, "x")
			cs := makeChunks(kb, 1+rng.Intn(4))
			if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), cs); err != nil {
				t.Fatal(err)
			}
			docs = append(docs, &docRef{doc: d, kb: kb, chunks: cs})
		}
	}
	compactAll := func() {
		for {
			more, err := s.CompactKeywords(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				return
			}
		}
	}
	multiRound := 0
	check := func(phase string) {
		t.Helper()
		for i := 0; i < 60; i++ {
			var terms []string
			switch i % 4 {
			case 0:
				terms = []string{"the"}
			case 1:
				terms = []string{word()}
			case 2:
				terms = []string{"the", "half", word()}
			default:
				terms = []string{word(), word(), "half"}
			}
			terms = distinctSorted(sortedCopy(terms))
			counts := make([]int, len(terms))
			for j := range counts {
				counts[j] = 1 + rng.Intn(2)
			}
			chosen := []service.ID{kbs[i%3].ID}
			if i%5 == 0 {
				chosen = []service.ID{kbs[0].ID, kbs[1].ID, kbs[2].ID}
			}
			q := service.KeywordQuery{KnowledgeBaseIDs: chosen, Terms: termCounts(terms, counts), K1: 1.2, B: 0.75, Limit: 10}
			if i%7 == 0 {
				q.K1, q.B, q.Limit = 0.9, 0.4, 50
			}
			got, err := s.KeywordSearch(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, fmt.Sprintf("%s, query %d %v", phase, i, q.Terms), ref, q, got)
			// The smallest budgets: one block (or one segment's blocks) per
			// round trip, θ rising between any two fetches.
			for _, p := range []keyword.Policy{{First: 1}, {First: 1, Shift: 1}, {First: 1, EssentialOnly: true},
				{First: 2, Shift: 1, EssentialOnly: true}} {
				var st keyword.Stats
				got, err := s.keywordSearchWith(ctx, q, p, &st)
				if err != nil {
					t.Fatal(err)
				}
				checkSame(t, fmt.Sprintf("%s, query %d %v, policy %+v", phase, i, q.Terms, p), ref, q, got)
				if p.Shift == 0 && st.Rounds > 1 {
					multiRound++
				}
			}
		}
	}

	ingest(300)
	check("tail only")
	compactAll()
	if full := checkBlocks(t, s); full < 6 {
		t.Fatalf("%d full blocks: too few to test skipping", full)
	}
	multiRound = 0
	check("blocks only")
	if multiRound < 10 {
		t.Fatalf("%d queries took more than one round trip at one block per round: the multi-round path is not tested", multiRound)
	}
	ingest(200)
	check("blocks and tail")

	// Remove documents (compacted and not), reindex others: old chunks stay
	// until the new generation replaces them, then vanish.
	for i, d := range docs {
		switch {
		case i%9 == 0:
			if err := s.DeleteDocument(ctx, d.doc.ID); err != nil {
				t.Fatal(err)
			}
			for _, c := range d.chunks {
				delete(ref.chunks, c.ID)
			}
		case i%9 == 1:
			doc, err := s.Reindex(ctx, d.doc.ID, func(doc *service.Document) service.OutboxMessage {
				return service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: "k", Payload: []byte("{}")}
			})
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				continue // reindexing: the old chunks stay searchable
			}
			for _, c := range d.chunks {
				delete(ref.chunks, c.ID)
			}
			cs := makeChunks(d.kb, 1+rng.Intn(3))
			if err := s.ReplaceChunks(ctx, d.doc.ID, doc.Generation, docSpace(t, s, d.doc.ID), cs); err != nil {
				t.Fatal(err)
			}
			d.chunks = cs
		}
	}
	check("after removals, before compaction")
	ingest(100)
	compactAll()
	check("after compaction")
	var left int64
	if err := s.db.Raw("SELECT (SELECT count(*) FROM keyword_dead) + (SELECT count(*) FROM keyword_tail)").Scan(&left).Error; err != nil || left != 0 {
		t.Fatalf("%d dead or tail rows left after a full compaction (%v)", left, err)
	}

	// Compaction emptied the tail; its indexes shrink back.
	var before, after int64
	s.db.Raw("SELECT pg_indexes_size('keyword_tail')").Scan(&before)
	if err := s.ShrinkKeywordTail(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s.db.Raw("SELECT pg_indexes_size('keyword_tail')").Scan(&after)
	if after >= before {
		t.Fatalf("tail indexes %d bytes after the shrink, %d before", after, before)
	}

	// A deleted knowledge base takes its whole index with it.
	if err := s.DeleteKnowledgeBase(ctx, kbs[2].ID); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"keyword_blocks", "keyword_tail", "keyword_docs", "keyword_dead", "keyword_stats"} {
		if err := s.db.Raw("SELECT count(*) FROM "+table+" WHERE kb_id = ?", int64(kbs[2].ID)).Scan(&left).Error; err != nil || left != 0 {
			t.Fatalf("%s keeps %d rows of a deleted knowledge base (%v)", table, left, err)
		}
	}
	q := service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kbs[0].ID, kbs[1].ID, kbs[2].ID}, Terms: ones("the", "half"),
		K1: 1.2, B: 0.75, Limit: 10}
	for id, c := range ref.chunks {
		if c.kb == kbs[2].ID {
			delete(ref.chunks, id)
		}
	}
	got, err := s.KeywordSearch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, "after deleting a knowledge base", ref, q, got)
}

func sortedCopy(ss []string) []string {
	out := append([]string(nil), ss...)
	sort.Strings(out)
	return out
}

// keyword_docs keeps a chunk's terms space-separated (migration 0011), so
// a term with a space is refused before anything is written.
func TestKeywordTermWithSpaceRefused(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	d := seedDoc(t, s, kb, "x")
	c := chunk(0, "c", unit(4, 0), "fine")
	c.Terms["two words"] = 1
	err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{c})
	if !errors.Is(err, service.ErrInvalid) {
		t.Fatalf("a term with a space: %v, want ErrInvalid", err)
	}
	var n int64
	if err := s.db.Raw("SELECT (SELECT count(*) FROM keyword_docs) + (SELECT count(*) FROM chunks WHERE document_id = ?)", int64(d.ID)).
		Scan(&n).Error; err != nil || n != 0 {
		t.Fatalf("%d rows written for the refused chunk (%v)", n, err)
	}
}

// A term listed more than once counts as often as it is listed, as if its
// count said so: the search keeps one block list per term.
func TestKeywordRepeatedTermsFold(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	for i := range keyword.BlockSize + 40 { // blocks and a tail for "a"
		d := seedDoc(t, s, kb, fmt.Sprint("d", i))
		terms := []string{"a", "x"}
		if i%3 == 0 {
			terms = append(terms, "b", "a")
		}
		if err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{chunk(0, "c", unit(4, 0), terms...)}); err != nil {
			t.Fatal(err)
		}
		if i == keyword.BlockSize {
			for more := true; more; {
				var err error
				if more, err = s.CompactKeywords(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	search := func(terms []string, counts []int) []service.SearchResult {
		got, err := s.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Terms: termCounts(terms, counts),
			K1: 1.2, B: 0.75, Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := search([]string{"a", "b"}, []int{3, 1})
	if len(want) != 20 {
		t.Fatalf("%d results, want 20", len(want))
	}
	for _, q := range []struct {
		terms  []string
		counts []int
	}{
		{[]string{"a", "b", "a"}, []int{1, 1, 2}},
		{[]string{"a", "a", "b", "a"}, []int{1, 1, 1}}, // the missing count, 0, is 1
	} {
		got := search(q.terms, q.counts)
		if !slices.EqualFunc(got, want, func(a, b service.SearchResult) bool { return a.ChunkID == b.ChunkID && a.Score == b.Score }) {
			t.Fatalf("%v %v: results differ from a ×3, b ×1", q.terms, q.counts)
		}
	}
}

// ones is terms, each with count 1.
func ones(terms ...string) []service.TermCount {
	out := make([]service.TermCount, len(terms))
	for i, t := range terms {
		out[i] = service.TermCount{Term: t, Count: 1}
	}
	return out
}

// termCounts pairs terms with counts; a term past the end of counts gets
// count 0, which a search takes as 1.
func termCounts(terms []string, counts []int) []service.TermCount {
	out := make([]service.TermCount, len(terms))
	for i, t := range terms {
		out[i].Term = t
		if i < len(counts) {
			out[i].Count = counts[i]
		}
	}
	return out
}
