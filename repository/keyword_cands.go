package repository

import (
	"cmp"
	"sync"
)

// cand is a chunk in play in a keyword query: the sum of its term scores
// known so far.
type cand struct {
	kb, id int64
	score  float64
}

func compareCands(a, b cand) int {
	if c := cmp.Compare(a.kb, b.kb); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// merge adds runs, each sorted by (kb, id), into ks.cands: a chunk already
// there gains the scores, a new one joins, and a chunk met more than once
// (in several runs, or several times in the tail's run) gets their sum.
// Runs are few (a knowledge base and term each), so the next entry is found
// by a scan of their heads.
func (ks *kwSearch) merge(runs [][]cand) {
	heads := make([][]cand, 0, len(runs)+1)
	for _, r := range append(runs, ks.cands) {
		if len(r) > 0 {
			heads = append(heads, r)
		}
	}
	n := 0
	for _, h := range heads {
		n += len(h)
	}
	out := ks.scratch.spare[:0]
	if cap(out) < n {
		out = make([]cand, 0, n)
	}
	for len(heads) > 0 {
		mi := 0
		for i := 1; i < len(heads); i++ {
			if compareCands(heads[i][0], heads[mi][0]) < 0 {
				mi = i
			}
		}
		c := heads[mi][0]
		if last := len(out) - 1; last >= 0 && out[last].kb == c.kb && out[last].id == c.id {
			out[last].score += c.score
		} else {
			out = append(out, c)
		}
		if heads[mi] = heads[mi][1:]; len(heads[mi]) == 0 {
			heads = append(heads[:mi], heads[mi+1:]...)
		}
	}
	// The old list's array is the next merge's output.
	ks.scratch.spare, ks.cands = ks.cands[:0], out
}

// kwScratch is a query's per-chunk buffers, kept for the next query: a
// slow query's are megabytes, and allocating them anew each time made
// allocation and garbage collection a quarter of the query's CPU.
type kwScratch struct {
	cands, spare []cand // the candidate list and the array the next merge writes
	inc, sorted  []cand // a round's postings as they arrive, and grouped into runs
}

var kwScratchPool = sync.Pool{New: func() any { return new(kwScratch) }}

// maxPooled bounds what an idle pooled scratch holds (4 × 24 MiB at most):
// one query over a huge term list should not pin its memory for good.
const maxPooled = 1 << 20

// useScratch takes a pooled scratch for ks.
func (ks *kwSearch) useScratch() {
	ks.scratch = kwScratchPool.Get().(*kwScratch)
	ks.cands = ks.scratch.cands[:0]
}

// release returns ks's scratch to the pool; ks must not be used after.
func (ks *kwSearch) release() {
	sc := ks.scratch
	if sc == nil {
		return
	}
	sc.cands = ks.cands[:0]
	ks.scratch, ks.cands = nil, nil
	for _, b := range [][]cand{sc.cands, sc.spare, sc.inc, sc.sorted} {
		if cap(b) > maxPooled {
			return
		}
	}
	kwScratchPool.Put(sc)
}
