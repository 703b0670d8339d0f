package repository

import (
	"cmp"
	"container/heap"
	"context"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ragent-go/ragent/service"
)

// keywordStartSQL reads, in one round trip, everything a keyword query
// needs before it fetches any block: the query terms' block heads (one
// concatenated bytea per knowledge base and term), their tail postings,
// the removed chunks still in their blocks, and the collection statistics.
// Every key leads with kb_id, so other knowledge bases' rows are never read.
//
// The heads come from an index-only scan per knowledge base and term, in
// the primary key's order, concatenated as they come: a GROUP BY over all
// the terms, or an ordered aggregate, sorted them instead (thousands of
// heads for a common word at a million chunks: 6.8 ms against 1.5 ms for
// three such words). Aggregating a sorted subquery keeps its order in
// practice but not by guarantee, so startKeywordSearch sorts each term's
// heads.
const keywordStartSQL = `
WITH kb AS (SELECT id FROM knowledge_bases WHERE id = ANY($1) AND deleted_at IS NULL)
SELECT 0 AS kind, kb.id, q.term, 0::int8 AS id, 0::int8 AS a, 0::int8 AS b, h.data
	FROM kb CROSS JOIN unnest($2::text[]) AS q(term)
	CROSS JOIN LATERAL (SELECT string_agg(s.head, ''::bytea) AS data FROM
		(SELECT b.head FROM keyword_blocks b WHERE b.kb_id = kb.id AND b.term = q.term ORDER BY b.last_id) s) h
	WHERE h.data IS NOT NULL
UNION ALL
SELECT 1, t.kb_id, t.term, t.chunk_id, t.tf, t.dl, NULL FROM keyword_tail t
	WHERE t.kb_id IN (SELECT id FROM kb) AND t.term = ANY($2)
UNION ALL
SELECT 2, d.kb_id, u.term, d.chunk_id, 0, 0, NULL FROM keyword_dead d CROSS JOIN LATERAL unnest(d.terms) AS u(term)
	WHERE d.kb_id IN (SELECT id FROM kb) AND u.term = ANY($2)
UNION ALL
SELECT 3, 0, '', 0, coalesce(sum(s.chunks), 0)::int8, coalesce(sum(s.terms), 0)::int8, NULL FROM keyword_stats s
	WHERE s.kb_id IN (SELECT id FROM kb)`

const keywordBlocksSQL = `SELECT b.kb_id, b.term, b.last_id, b.payload
	FROM unnest($1::int8[], $2::text[], $3::int8[]) AS x(kb_id, term, last_id)
	JOIN keyword_blocks b ON b.kb_id = x.kb_id AND b.term = x.term AND b.last_id = x.last_id`

// boundSlack absorbs rounding: a bound is the same formula as a score at a
// dominating (tf, dl), equal or larger in exact arithmetic but possibly an
// ulp below after rounding. Blocks are skipped only when their bound is
// below the k-th score by more than this relative margin.
const boundSlack = 1e-9

const keywordRowsSQL = `SELECT c.id, c.document_id, d.name, c.kb_id, c.content, c.section
	FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY($1)`

// KeywordSearch ranks chunks by BM25 (Okapi, Lucene's idf) and returns the
// exact top Limit, ties broken by chunk id, without scoring every posting:
// block-max pruning over the compacted blocks, the tail scored whole.
//
// All its reads share one snapshot (a read-only repeatable-read
// transaction), so a concurrent compaction or ingestion is seen entirely or
// not at all. Round trips dominate its time, so it speaks pgx on one pooled
// connection and pipelines: BEGIN with the first read, each round of block
// fetches alone, the chunks' rows with COMMIT. It reads committed data only,
// even when ctx carries an InTx transaction.
func (s *Store) KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchResult, error) {
	return s.keywordSearchWith(ctx, q, defaultFetch, nil)
}

// keywordSearchWith is KeywordSearch with a given fetch policy, recording
// its work in st when st is not nil: the tests and the benchmark compare
// policies with it.
func (s *Store) keywordSearchWith(ctx context.Context, q service.KeywordQuery, policy fetchPolicy, st *kwStats) ([]service.SearchResult, error) {
	if len(q.Terms) == 0 || len(q.KnowledgeBaseIDs) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	q = foldTerms(q)
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer conn.Close()
	var out []service.SearchResult
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		out, err = keywordSearch(ctx, pc, q, policy, st)
		if err != nil && !pc.PgConn().IsClosed() {
			// Never hand the pool a connection inside a transaction.
			if _, rbErr := pc.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				return driver.ErrBadConn
			}
		}
		return err
	})
	return out, translate(err)
}

// foldTerms returns q with each term once, its count the sum of its
// occurrences' (1 each where Counts is short): the search keeps one block
// list per term, and a term listed twice would give it two that overlap.
func foldTerms(q service.KeywordQuery) service.KeywordQuery {
	seen := make(map[string]int, len(q.Terms))
	terms, counts := make([]string, 0, len(q.Terms)), make([]int, 0, len(q.Terms))
	for i, t := range q.Terms {
		c := 1
		if i < len(q.Counts) {
			c = q.Counts[i]
		}
		if j, ok := seen[t]; ok {
			counts[j] += c
			continue
		}
		seen[t] = len(terms)
		terms, counts = append(terms, t), append(counts, c)
	}
	q.Terms, q.Counts = terms, counts
	return q
}

func keywordSearch(ctx context.Context, pc *pgx.Conn, q service.KeywordQuery, policy fetchPolicy, st *kwStats) ([]service.SearchResult, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	kbs := make([]int64, len(q.KnowledgeBaseIDs))
	for i, id := range q.KnowledgeBaseIDs {
		kbs[i] = int64(id)
	}
	b.Queue(keywordStartSQL, kbs, q.Terms)
	br := pc.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	ks, err := startKeywordSearch(rows, q)
	rows.Close()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if ks != nil {
		defer ks.release()
	}
	if err != nil {
		return nil, err
	}
	for round := 0; ; round++ {
		want := ks.neededBlocks(policy, round)
		if len(want) == 0 {
			break
		}
		decoded, err := ks.fetch(ctx, pc, want)
		if err != nil {
			return nil, err
		}
		st.addRound(len(want), decoded)
	}
	return ks.results(ctx, pc)
}

// kwSearch is one query's state: the statistics, the blocks of each
// knowledge base with their bounds, and the chunks seen so far with the
// exact term scores known for them.
type kwSearch struct {
	q       service.KeywordQuery
	m       bm25
	weights []float64 // per query term: count × idf
	terms   map[string]int
	blocks  map[int64][][]*kwBlock // by knowledge base, then term: each term's blocks in id order
	dead    map[deadKey]bool       // removed chunks' postings still in blocks
	// cands are the chunks that unfetched blocks may still add to, in
	// (kb, id) order, with the sum of the term scores known so far. Each
	// round's postings arrive as sorted runs (a term's blocks are id
	// ranges that never overlap) and are merged in: every pass is
	// sequential, where a hash table keyed by chunk id missed the cache on
	// nearly every posting of a large query.
	cands   []cand
	final   *topK // the top k of the chunks whose scores are final
	scratch *kwScratch
}

type kwBlock struct {
	kb      int64
	term    int
	head    blockHead
	ub      float64
	fetched bool
	// liveIn is the last round (from 1) that found the block in a live
	// segment. θ only rises and a chunk's bound (known scores plus
	// unfetched bounds) only falls, so a block the previous round found in
	// no live segment is never needed again: later rounds leave it out of
	// their segments (pruned).
	liveIn int
	wantIn int // the last round (from 1) that asked for the block
}

// pruned reports whether b is out of play in round: fetched, or left in no
// live segment by the round before.
func (b *kwBlock) pruned(round int) bool { return b.fetched || round > 0 && b.liveIn != round }

func startKeywordSearch(rows pgx.Rows, q service.KeywordQuery) (*kwSearch, error) {
	ks := &kwSearch{q: q, terms: make(map[string]int, len(q.Terms)), blocks: map[int64][][]*kwBlock{},
		dead: map[deadKey]bool{}, final: newTopK(q.Limit)}
	for i, t := range q.Terms {
		ks.terms[t] = i
	}
	df := make([]float64, len(q.Terms))
	type tailPosting struct {
		kb   int64
		term int
		posting
	}
	var (
		tail         []tailPosting
		n, termTotal float64
	)
	for rows.Next() {
		var (
			kind   int
			kb, id int64
			term   string
			a, b   int64
			data   []byte
		)
		if err := rows.Scan(&kind, &kb, &term, &id, &a, &b, &data); err != nil {
			return nil, err
		}
		ti := ks.terms[term]
		switch kind {
		case 0:
			heads, err := decodeHeads(data)
			if err != nil {
				return nil, err
			}
			byTerm := ks.blocks[kb]
			if byTerm == nil {
				byTerm = make([][]*kwBlock, len(q.Terms))
				ks.blocks[kb] = byTerm
			}
			bs := make([]kwBlock, len(heads))
			for i, h := range heads {
				df[ti] += float64(h.n)
				bs[i] = kwBlock{kb: kb, term: ti, head: h}
				byTerm[ti] = append(byTerm[ti], &bs[i])
			}
		case 1:
			df[ti]++
			tail = append(tail, tailPosting{kb, ti, posting{id: id, tf: int32(a), dl: int32(b)}})
		case 2:
			df[ti]--
			ks.dead[deadKey{ti, id}] = true
		case 3:
			n, termTotal = float64(a), float64(b)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	ks.m = bm25{k1: q.K1, b: q.B, avgdl: max(termTotal/max(n, 1), 1)}
	ks.weights = make([]float64, len(q.Terms))
	for i := range q.Terms {
		count := 1.0
		if i < len(q.Counts) {
			count = float64(q.Counts[i])
		}
		ks.weights[i] = count * ks.m.idf(n, df[i])
	}
	ks.useScratch()
	// The tail as one run per knowledge base and term, as merge takes it.
	slices.SortFunc(tail, func(a, b tailPosting) int {
		return cmp.Or(cmp.Compare(a.kb, b.kb), cmp.Compare(a.term, b.term), cmp.Compare(a.id, b.id))
	})
	inc := slices.Grow(ks.scratch.inc[:0], len(tail))
	var runs [][]cand
	from := 0
	for i, p := range tail {
		inc = append(inc, cand{kb: p.kb, id: p.id, score: ks.m.termScore(ks.weights[p.term], p.tf, p.dl)})
		if i+1 == len(tail) || tail[i+1].kb != p.kb || tail[i+1].term != p.term {
			runs, from = append(runs, inc[from:]), len(inc)
		}
	}
	ks.scratch.inc = inc
	ks.merge(runs)
	for _, byTerm := range ks.blocks {
		for _, bs := range byTerm {
			// segments sweeps each term's blocks in id order, and an
			// unsorted list would lose bounds. The start query sends them
			// so in practice, not by guarantee (see keywordStartSQL); on
			// sorted input the sort is one pass.
			slices.SortFunc(bs, func(a, b *kwBlock) int { return cmp.Compare(a.head.first, b.head.first) })
			for _, b := range bs {
				b.ub = ks.m.bound(ks.weights[b.term], b.head.impacts)
			}
		}
	}
	return ks, nil
}

type deadKey struct {
	term int
	id   int64
}

// fetch reads want's payloads and scores their postings; it returns the
// number of postings decoded.
func (ks *kwSearch) fetch(ctx context.Context, pc *pgx.Conn, want []*kwBlock) (int, error) {
	kbs, terms, lasts := make([]int64, len(want)), make([]string, len(want)), make([]int64, len(want))
	incoming := 0
	for i, b := range want {
		kbs[i], terms[i], lasts[i] = b.kb, ks.q.Terms[b.term], b.head.last
		incoming += b.head.n
	}
	// The postings as they arrive, block after block in any order, then
	// grouped into one sorted run per knowledge base and term.
	inc := slices.Grow(ks.scratch.inc[:0], incoming)
	type extent struct {
		kb      int64
		term    int
		from, n int
	}
	extents := make([]extent, 0, len(want))
	rows, err := pc.Query(ctx, keywordBlocksSQL, kbs, terms, lasts)
	if err != nil {
		return 0, err
	}
	decoded := 0
	defer rows.Close()
	for rows.Next() {
		var (
			kb, last int64
			term     string
			payload  pgtype.DriverBytes // the driver's buffer, not a copy: ~1 MB per slow query
		)
		if err := rows.Scan(&kb, &term, &last, &payload); err != nil {
			return 0, err
		}
		if len(payload)%postingBytes != 0 {
			return 0, fmt.Errorf("keyword block payload: %d bytes", len(payload))
		}
		decoded += len(payload) / postingBytes
		ti := ks.terms[term]
		w, from := ks.weights[ti], len(inc)
		for b := payload; len(b) > 0; b = b[postingBytes:] {
			id := int64(binary.BigEndian.Uint64(b))
			if len(ks.dead) > 0 && ks.dead[deadKey{ti, id}] {
				continue // a removed chunk's posting, left in the block
			}
			inc = append(inc, cand{kb: kb, id: id,
				score: ks.m.termScore(w, int32(binary.BigEndian.Uint32(b[8:])), int32(binary.BigEndian.Uint32(b[12:])))})
		}
		if len(inc) > from {
			extents = append(extents, extent{kb: kb, term: ti, from: from, n: len(inc) - from})
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// Marked even if a row were missing, so the search always progresses.
	for _, b := range want {
		b.fetched = true
	}
	slices.SortFunc(extents, func(a, b extent) int {
		if c := cmp.Compare(a.kb, b.kb); c != 0 {
			return c
		}
		if c := cmp.Compare(a.term, b.term); c != 0 {
			return c
		}
		return cmp.Compare(inc[a.from].id, inc[b.from].id)
	})
	sorted := slices.Grow(ks.scratch.sorted[:0], len(inc))
	var runs [][]cand
	runFrom := 0
	for i, e := range extents {
		sorted = append(sorted, inc[e.from:e.from+e.n]...)
		if i+1 == len(extents) || extents[i+1].kb != e.kb || extents[i+1].term != e.term {
			runs = append(runs, sorted[runFrom:])
			runFrom = len(sorted)
		}
	}
	ks.scratch.inc, ks.scratch.sorted = inc, sorted
	ks.merge(runs)
	return decoded, nil
}

type blockKey struct {
	kb   int64
	term int
	last int64
}

// segment is a maximal chunk-id range of one knowledge base covered by the
// same unfetched blocks. A chunk in it scores at most its known term scores
// plus ub, the sum of those blocks' bounds (a term whose block is fetched
// contributes exactly what is known, zero for a chunk not in it).
type segment struct {
	lo, hi   int64
	ub       float64
	maxKnown float64
	blocks   []*kwBlock
}

// neededBlocks returns the unfetched blocks that may still hold a top-k
// chunk, the most promising first, at most budget of them (more when the
// last segment taken straddles the budget). None means the top k is exact.
func (ks *kwSearch) neededBlocks(policy fetchPolicy, round int) []*kwBlock {
	budget := policy.budget(round)
	byKB := make(map[int64][]segment, len(ks.blocks))
	for kb, byTerm := range ks.blocks {
		byKB[kb] = segments(byTerm, round)
	}
	// A chunk outside every segment has no unfetched block left that could
	// add to it: its score is final, and it leaves cands for good, so each
	// round revisits only the chunks still in play. cands and each
	// knowledge base's segments are both in id order: one walk over both.
	// A chunk that cannot reach θ even with every block left in its
	// segment leaves too: θ only rises, so it never could (should a later
	// block bring it back, its partial score falls short all the more).
	th := ks.final.threshold()
	kept := ks.cands[:0]
	var (
		kbSegs []segment
		si     int
		kb     int64
	)
	for i, c := range ks.cands {
		if i == 0 || c.kb != kb {
			kb, kbSegs, si = c.kb, byKB[c.kb], 0
		}
		for si < len(kbSegs) && kbSegs[si].hi < c.id {
			si++
		}
		if si < len(kbSegs) && kbSegs[si].lo <= c.id {
			if sg := &kbSegs[si]; (c.score+sg.ub)*(1+boundSlack) >= th {
				sg.maxKnown = max(sg.maxKnown, c.score)
				kept = append(kept, c)
			}
			continue
		}
		ks.final.offer(c.score, c.id)
	}
	ks.cands = kept
	th = ks.final.threshold()
	var live segmentHeap
	for _, kbSegs := range byKB {
		for i := range kbSegs {
			if sg := &kbSegs[i]; (sg.ub+sg.maxKnown)*(1+boundSlack) >= th {
				live = append(live, sg)
				for _, b := range sg.blocks {
					b.liveIn = round + 1
				}
			}
		}
	}
	// Highest bound first; only as many segments as the budget takes are
	// ever ordered, out of tens of thousands at a million chunks.
	heap.Init(&live)
	var want []*kwBlock
	for len(live) > 0 && len(want) < budget {
		sg := heap.Pop(&live).(*segment)
		if policy.essentialOnly {
			// Highest bound first: a term whose block bounds it high is
			// the likeliest to lift a chunk over θ.
			slices.SortFunc(sg.blocks, func(a, b *kwBlock) int { return cmp.Compare(b.ub, a.ub) })
		}
		rest := sg.ub
		for _, b := range sg.blocks {
			if b.wantIn != round+1 {
				b.wantIn = round + 1
				want = append(want, b)
			}
			rest -= b.ub
			// The blocks left can lift no chunk of the segment over θ by
			// themselves: they are fetched in a later round only if the
			// scores these blocks reveal keep the segment above θ
			// (MaxScore's non-essential lists, per segment).
			if policy.essentialOnly && (rest+sg.maxKnown)*(1+boundSlack) < th {
				break
			}
		}
	}
	return want
}

// segmentHeap orders segments by the most a chunk in them can score,
// highest first.
type segmentHeap []*segment

func (h segmentHeap) Len() int { return len(h) }
func (h segmentHeap) Less(i, j int) bool {
	return h[i].ub+h[i].maxKnown > h[j].ub+h[j].maxKnown
}
func (h segmentHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *segmentHeap) Push(x any)   { *h = append(*h, x.(*segment)) }
func (h *segmentHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// segments splits the id ranges of a knowledge base's blocks still in play
// in round into segments, in id order, and first drops the blocks out of
// play from byTerm for good, so each round sweeps only the blocks the
// previous one left live. byTerm holds each term's blocks in id order, and
// a term's blocks never overlap, so one sweep over the terms' lists finds
// every boundary: the work is the number of blocks times the number of
// terms, with no sorting, and a segment holds at most one block per term.
func segments(byTerm [][]*kwBlock, round int) []segment {
	n := 0
	for t, bs := range byTerm {
		byTerm[t] = slices.DeleteFunc(bs, func(b *kwBlock) bool { return b.pruned(round) })
		n += len(byTerm[t])
	}
	next := make([]int, len(byTerm)) // per term: its first block not passed yet
	skip := func(t int, at int64) {
		bs := byTerm[t]
		for next[t] < len(bs) && bs[next[t]].head.last < at {
			next[t]++
		}
	}
	// A block starts one segment and ends another at most: 2n of them.
	out := make([]segment, 0, 2*n)
	backing := make([]*kwBlock, 0, 2*n) // the segments' block lists, end to end
	at := int64(math.MinInt64)
	for {
		// The next boundary: the end of an active block, or the start of
		// a term's next block.
		end, active, more := int64(math.MaxInt64), false, false
		for t, bs := range byTerm {
			if next[t] == len(bs) {
				continue
			}
			more = true
			if b := bs[next[t]]; b.head.first <= at {
				active, end = true, min(end, b.head.last+1)
			} else {
				end = min(end, b.head.first)
			}
		}
		if !more {
			return out
		}
		if active {
			from := len(backing)
			sg := segment{lo: at, hi: end - 1}
			for t, bs := range byTerm {
				if next[t] < len(bs) && bs[next[t]].head.first <= at {
					backing = append(backing, bs[next[t]])
					sg.ub += bs[next[t]].ub
				}
			}
			sg.blocks = backing[from:len(backing):len(backing)]
			out = append(out, sg)
		}
		at = end
		for t := range byTerm {
			skip(t, at)
		}
	}
}

// results returns the top k with their rows. It runs after neededBlocks
// found nothing left to fetch, so its exactly scored top k is the answer.
func (ks *kwSearch) results(ctx context.Context, pc *pgx.Conn) ([]service.SearchResult, error) {
	ranked := ks.final.sorted()
	ids := make([]int64, len(ranked))
	for i, r := range ranked {
		ids[i] = r.id
	}
	b := &pgx.Batch{}
	b.Queue(keywordRowsSQL, ids)
	b.Queue("COMMIT")
	br := pc.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]searchRow, len(ranked))
	for rows.Next() {
		var r searchRow
		if err := rows.Scan(&r.ChunkID, &r.DocumentID, &r.DocumentName, &r.KbID, &r.Content, &r.Section); err != nil {
			rows.Close()
			return nil, err
		}
		byID[r.ChunkID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	out := make([]service.SearchResult, 0, len(ranked))
	for _, r := range ranked {
		if row, ok := byID[r.id]; ok {
			row.Score = r.score
			out = append(out, row.result())
		}
	}
	return out, nil
}

// topK keeps the k best (score, id) pairs: higher score first, then lower id.
type topK struct {
	k int
	h scoredHeap
}

type scored struct {
	score float64
	id    int64
}

// scoredHeap is a min-heap: its root is the worst of the kept pairs.
type scoredHeap []scored

func worse(a, b scored) bool { return a.score < b.score || a.score == b.score && a.id > b.id }

func (h scoredHeap) Len() int           { return len(h) }
func (h scoredHeap) Less(i, j int) bool { return worse(h[i], h[j]) }
func (h scoredHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *scoredHeap) Push(x any)        { *h = append(*h, x.(scored)) }
func (h *scoredHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newTopK(k int) *topK { return &topK{k: k} }

func (t *topK) offer(score float64, id int64) {
	s := scored{score, id}
	if len(t.h) < t.k {
		heap.Push(&t.h, s)
		return
	}
	if worse(t.h[0], s) {
		t.h[0] = s
		heap.Fix(&t.h, 0)
	}
}

// threshold is the k-th best score, or -Inf while fewer than k are known.
func (t *topK) threshold() float64 {
	if len(t.h) < t.k {
		return math.Inf(-1)
	}
	return t.h[0].score
}

func (t *topK) sorted() []scored {
	out := append([]scored(nil), t.h...)
	sort.Slice(out, func(i, j int) bool { return worse(out[j], out[i]) })
	return out
}
