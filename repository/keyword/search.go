// Package keyword is the pure core of the keyword index: the block codec
// (block.go), the merge of sorted postings into the candidate list
// (merge.go), the fetch policy (policy.go), and one query's plan (this
// file): BM25 statistics, block bounds, the segments of chunk ids that the
// same unfetched blocks cover, the blocks a round must fetch, the exact top
// k, and how compaction cuts a term's postings into blocks (compact.go).
// It reads and writes nothing: package repository runs the SQL and feeds
// a Search the rows it reads.
package keyword

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/ragent-go/ragent/service"
)

// boundSlack absorbs rounding: a bound is the same formula as a score at a
// dominating (tf, dl), equal or larger in exact arithmetic but possibly an
// ulp below after rounding. Blocks are skipped only when their bound is
// below the k-th score by more than this relative margin.
const boundSlack = 1e-9

// Fold returns terms with each term once, its count the sum of its
// occurrences' (at least 1 each): a search keeps one block list per term,
// and a term listed twice would give it two that overlap.
func Fold(terms []service.TermCount) []service.TermCount {
	seen := make(map[string]int, len(terms))
	out := make([]service.TermCount, 0, len(terms))
	for _, t := range terms {
		c := max(t.Count, 1)
		if j, ok := seen[t.Term]; ok {
			out[j].Count += c
			continue
		}
		seen[t.Term] = len(out)
		out = append(out, service.TermCount{Term: t.Term, Count: c})
	}
	return out
}

// Search is one query's state: the statistics, the blocks of each
// knowledge base with their bounds, and the chunks seen so far with the
// exact term scores known for them. Feed it what the start query read
// (AddHeads, AddTail, AddDead, SetStats), call Start, then per round fetch
// the blocks Needed returns and hand their payloads to AddPayload and the
// round to EndRound, until Needed returns none: Ranked is then the exact
// top k. Release returns its buffers to the pool.
type Search struct {
	terms   []service.TermCount // folded: each term once
	index   map[string]int      // a term's position in terms
	m       bm25
	weights []float64            // per query term: count × idf
	blocks  map[int64][][]*Block // by knowledge base, then term: each term's blocks in id order
	dead    map[deadKey]bool     // removed chunks' postings still in blocks
	// cands are the chunks that unfetched blocks may still add to, in
	// (kb, id) order, with the sum of the term scores known so far. Each
	// round's postings arrive as sorted runs (a term's blocks are id
	// ranges that never overlap) and are merged in: every pass is
	// sequential, where a hash table keyed by chunk id missed the cache on
	// nearly every posting of a large query.
	cands   []cand
	final   *topK // the top k of the chunks whose scores are final
	scratch *scratch

	// Before Start: document frequencies, the tail, the statistics.
	df           []float64
	tail         []tailPosting
	n, termTotal float64

	// During a round: the postings as they arrive (scratch.inc), block
	// after block in any order, with where each block's begin.
	extents []extent
}

type tailPosting struct {
	kb   int64
	term int
	Posting
}

type extent struct {
	kb      int64
	term    int
	from, n int
}

type deadKey struct {
	term int
	id   int64
}

// Block is one compacted block of a term in a knowledge base, as a search
// plans it: its head, its bound for this query, and whether it is fetched.
type Block struct {
	kb      int64
	term    int
	name    string
	head    Head
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

// KB, Term and Last are the block's key in keyword_blocks.
func (b *Block) KB() int64    { return b.kb }
func (b *Block) Term() string { return b.name }
func (b *Block) Last() int64  { return b.head.Last }

// pruned reports whether b is out of play in round: fetched, or left in no
// live segment by the round before.
func (b *Block) pruned(round int) bool { return b.fetched || round > 0 && b.liveIn != round }

// NewSearch starts a search for the top limit chunks by BM25 (k1, b) over
// terms, which must be folded (Fold).
func NewSearch(terms []service.TermCount, k1, b float64, limit int) *Search {
	ks := &Search{terms: terms, index: make(map[string]int, len(terms)), blocks: map[int64][][]*Block{},
		dead: map[deadKey]bool{}, final: newTopK(limit), df: make([]float64, len(terms)), m: bm25{k1: k1, b: b}}
	for i, t := range terms {
		ks.index[t.Term] = i
	}
	ks.useScratch()
	return ks
}

// AddHeads adds a term's block heads in a knowledge base, concatenated as
// the start query sends them.
func (ks *Search) AddHeads(kb int64, term string, data []byte) error {
	heads, err := DecodeHeads(data)
	if err != nil {
		return err
	}
	ti := ks.index[term]
	byTerm := ks.blocks[kb]
	if byTerm == nil {
		byTerm = make([][]*Block, len(ks.terms))
		ks.blocks[kb] = byTerm
	}
	bs := make([]Block, len(heads))
	for i, h := range heads {
		ks.df[ti] += float64(h.N)
		bs[i] = Block{kb: kb, term: ti, name: ks.terms[ti].Term, head: h}
		byTerm[ti] = append(byTerm[ti], &bs[i])
	}
	return nil
}

// AddTail adds a posting of the uncompacted tail.
func (ks *Search) AddTail(kb int64, term string, p Posting) {
	ti := ks.index[term]
	ks.df[ti]++
	ks.tail = append(ks.tail, tailPosting{kb, ti, p})
}

// AddDead records a removed chunk whose posting for term is still in a block.
func (ks *Search) AddDead(term string, id int64) {
	ti := ks.index[term]
	ks.df[ti]--
	ks.dead[deadKey{ti, id}] = true
}

// SetStats sets the collection statistics: live chunks and their terms.
func (ks *Search) SetStats(chunks, terms int64) {
	ks.n, ks.termTotal = float64(chunks), float64(terms)
}

// Start computes the weights and bounds once everything of the start
// query is in, and scores the tail.
func (ks *Search) Start() {
	ks.m.avgdl = max(ks.termTotal/max(ks.n, 1), 1)
	ks.weights = make([]float64, len(ks.terms))
	for i, t := range ks.terms {
		ks.weights[i] = float64(t.Count) * ks.m.idf(ks.n, ks.df[i])
	}
	// The tail as one run per knowledge base and term, as merge takes it.
	tail := ks.tail
	slices.SortFunc(tail, func(a, b tailPosting) int {
		return cmp.Or(cmp.Compare(a.kb, b.kb), cmp.Compare(a.term, b.term), cmp.Compare(a.ID, b.ID))
	})
	inc := slices.Grow(ks.scratch.inc[:0], len(tail))
	var runs [][]cand
	from := 0
	for i, p := range tail {
		inc = append(inc, cand{kb: p.kb, id: p.ID, score: ks.m.termScore(ks.weights[p.term], p.TF, p.DL)})
		if i+1 == len(tail) || tail[i+1].kb != p.kb || tail[i+1].term != p.term {
			runs, from = append(runs, inc[from:]), len(inc)
		}
	}
	ks.scratch.inc, ks.tail = inc, nil
	ks.merge(runs)
	for _, byTerm := range ks.blocks {
		for _, bs := range byTerm {
			// segments sweeps each term's blocks in id order, and an
			// unsorted list would lose bounds. The start query sends them
			// so in practice, not by guarantee; on sorted input the sort
			// is one pass.
			slices.SortFunc(bs, func(a, b *Block) int { return cmp.Compare(a.head.First, b.head.First) })
			for _, b := range bs {
				b.ub = ks.m.bound(ks.weights[b.term], b.head.Impacts)
			}
		}
	}
}

// AddPayload scores a fetched block's postings, skipping removed chunks'; it
// returns the number of postings decoded. Blocks may come in any order.
func (ks *Search) AddPayload(kb int64, term string, payload []byte) (int, error) {
	if len(payload)%PostingBytes != 0 {
		return 0, fmt.Errorf("keyword block payload: %d bytes", len(payload))
	}
	inc := ks.scratch.inc
	ti := ks.index[term]
	w, from := ks.weights[ti], len(inc)
	for b := payload; len(b) > 0; b = b[PostingBytes:] {
		id := int64(binary.BigEndian.Uint64(b))
		if len(ks.dead) > 0 && ks.dead[deadKey{ti, id}] {
			continue // a removed chunk's posting, left in the block
		}
		inc = append(inc, cand{kb: kb, id: id,
			score: ks.m.termScore(w, int32(binary.BigEndian.Uint32(b[8:])), int32(binary.BigEndian.Uint32(b[12:])))})
	}
	if len(inc) > from {
		ks.extents = append(ks.extents, extent{kb: kb, term: ti, from: from, n: len(inc) - from})
	}
	ks.scratch.inc = inc
	return len(payload) / PostingBytes, nil
}

// GrowFor reserves room for the postings of the blocks a round fetches.
func (ks *Search) GrowFor(want []*Block) {
	n := 0
	for _, b := range want {
		n += b.head.N
	}
	ks.scratch.inc = slices.Grow(ks.scratch.inc[:0], n)
}

// EndRound marks want fetched (even if a block were missing from the rows,
// so the search always progresses) and merges the round's postings, grouped
// into one sorted run per knowledge base and term, into the candidates.
func (ks *Search) EndRound(want []*Block) {
	for _, b := range want {
		b.fetched = true
	}
	inc, extents := ks.scratch.inc, ks.extents
	slices.SortFunc(extents, func(a, b extent) int {
		return cmp.Or(cmp.Compare(a.kb, b.kb), cmp.Compare(a.term, b.term), cmp.Compare(inc[a.from].id, inc[b.from].id))
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
	ks.scratch.inc, ks.scratch.sorted, ks.extents = inc[:0], sorted, extents[:0]
	ks.merge(runs)
}

// Scored is a chunk of the result and its BM25 score.
type Scored struct {
	Score float64
	ID    int64
}

// Ranked is the top k, best first, ties by lower id. It is exact once
// Needed has found nothing left to fetch.
func (ks *Search) Ranked() []Scored { return ks.final.sorted() }

// segment is a maximal chunk-id range of one knowledge base covered by the
// same unfetched blocks. A chunk in it scores at most its known term scores
// plus ub, the sum of those blocks' bounds (a term whose block is fetched
// contributes exactly what is known, zero for a chunk not in it).
type segment struct {
	lo, hi   int64
	ub       float64
	maxKnown float64
	blocks   []*Block
}

// Needed returns the unfetched blocks that may still hold a top-k
// chunk, the most promising first, at most budget of them (more when the
// last segment taken straddles the budget). None means the top k is exact.
func (ks *Search) Needed(policy Policy, round int) []*Block {
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
	var want []*Block
	for len(live) > 0 && len(want) < budget {
		sg := heap.Pop(&live).(*segment)
		if policy.EssentialOnly {
			// Highest bound first: a term whose block bounds it high is
			// the likeliest to lift a chunk over θ.
			slices.SortFunc(sg.blocks, func(a, b *Block) int { return cmp.Compare(b.ub, a.ub) })
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
			if policy.EssentialOnly && (rest+sg.maxKnown)*(1+boundSlack) < th {
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
func segments(byTerm [][]*Block, round int) []segment {
	n := 0
	for t, bs := range byTerm {
		byTerm[t] = slices.DeleteFunc(bs, func(b *Block) bool { return b.pruned(round) })
		n += len(byTerm[t])
	}
	next := make([]int, len(byTerm)) // per term: its first block not passed yet
	skip := func(t int, at int64) {
		bs := byTerm[t]
		for next[t] < len(bs) && bs[next[t]].head.Last < at {
			next[t]++
		}
	}
	// A block starts one segment and ends another at most: 2n of them.
	out := make([]segment, 0, 2*n)
	backing := make([]*Block, 0, 2*n) // the segments' block lists, end to end
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
			if b := bs[next[t]]; b.head.First <= at {
				active, end = true, min(end, b.head.Last+1)
			} else {
				end = min(end, b.head.First)
			}
		}
		if !more {
			return out
		}
		if active {
			from := len(backing)
			sg := segment{lo: at, hi: end - 1}
			for t, bs := range byTerm {
				if next[t] < len(bs) && bs[next[t]].head.First <= at {
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
