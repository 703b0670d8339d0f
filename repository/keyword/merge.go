package keyword

import "sync"

// cand is a chunk in play in a keyword query: the sum of its term scores
// known so far.
type cand struct {
	kb, id int64
	score  float64
}

// before orders chunks by (kb, id); it is small enough to inline in merge's
// loops.
func before(a, b *cand) bool { return a.kb < b.kb || a.kb == b.kb && a.id < b.id }

func same(a, b *cand) bool { return a.kb == b.kb && a.id == b.id }

// merge adds runs into ks.cands. Each run is sorted by (kb, id) and holds a
// chunk at most once (a knowledge base and term each); a chunk already in
// cands gains the runs' scores for it, a new one joins with their sum.
// Runs are few, so while several are left the next entry is found by a scan
// of their heads; the last run left is merged with the old list two-way,
// and what remains of either is copied whole.
func (ks *Search) merge(runs [][]cand) {
	old, n := ks.cands, len(ks.cands)
	heads := make([][]cand, 0, len(runs))
	for _, r := range runs {
		if len(r) > 0 {
			heads, n = append(heads, r), n+len(r)
		}
	}
	out := ks.scratch.spare[:0]
	if cap(out) < n {
		out = make([]cand, 0, n)
	}
	// Two lists' chunks meet in out's last entry.
	add := func(c *cand) {
		if last := len(out) - 1; last >= 0 && same(&out[last], c) {
			out[last].score += c.score
		} else {
			out = append(out, *c)
		}
	}
	for len(heads) > 1 {
		mi := 0
		for i := 1; i < len(heads); i++ {
			if before(&heads[i][0], &heads[mi][0]) {
				mi = i
			}
		}
		if len(old) > 0 && before(&old[0], &heads[mi][0]) {
			add(&old[0])
			old = old[1:]
			continue
		}
		add(&heads[mi][0])
		if heads[mi] = heads[mi][1:]; len(heads[mi]) == 0 {
			heads = append(heads[:mi], heads[mi+1:]...)
		}
	}
	var run []cand
	if len(heads) == 1 {
		run = heads[0]
	}
	// Everything left comes after out's last entry, except that the first
	// of run and the first of old may be that very chunk.
	if last := len(out) - 1; last >= 0 {
		if len(run) > 0 && same(&run[0], &out[last]) {
			out[last].score += run[0].score
			run = run[1:]
		}
		if len(old) > 0 && same(&old[0], &out[last]) {
			out[last].score += old[0].score
			old = old[1:]
		}
	}
	i, j := 0, 0
	for i < len(run) && j < len(old) {
		switch r, o := &run[i], &old[j]; {
		case before(r, o):
			out = append(out, *r)
			i++
		case before(o, r):
			out = append(out, *o)
			j++
		default:
			out = append(out, cand{kb: r.kb, id: r.id, score: o.score + r.score})
			i, j = i+1, j+1
		}
	}
	out = append(append(out, run[i:]...), old[j:]...)
	// The old list's array is the next merge's output.
	ks.scratch.spare, ks.cands = ks.cands[:0], out
}

// scratch is a query's per-chunk buffers, kept for the next query: a
// slow query's are megabytes, and allocating them anew each time made
// allocation and garbage collection a quarter of the query's CPU.
type scratch struct {
	cands, spare []cand // the candidate list and the array the next merge writes
	inc, sorted  []cand // a round's postings as they arrive, and grouped into runs
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooled bounds what an idle pooled scratch holds (4 × 24 MiB at most):
// one query over a huge term list should not pin its memory for good.
const maxPooled = 1 << 20

// useScratch takes a pooled scratch for ks.
func (ks *Search) useScratch() {
	ks.scratch = scratchPool.Get().(*scratch)
	ks.cands = ks.scratch.cands[:0]
}

// release returns ks's scratch to the pool; ks must not be used after.
func (ks *Search) Release() {
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
	scratchPool.Put(sc)
}
