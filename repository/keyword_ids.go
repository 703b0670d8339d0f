package repository

import (
	"math/bits"
	"sync"
)

// idTable maps the chunk ids a keyword query meets to dense indexes, 0, 1,
// 2… in order of arrival. A query that fetches hundreds of blocks meets
// one id per posting, ~100k of them, and a Go map spent most of the query's
// CPU there (a lookup, then an insert, then the splits as it grew); this
// table finds or inserts in one probe sequence (open addressing, linear
// probing, Fibonacci hashing, key and index side by side in one cache
// line) and is sized before each round of fetches from the blocks' counts.
type idTable struct {
	slots []idSlot
	shift uint // 64 - log2(len(slots))
	n     int
	// spare is the array slots last grew out of, reused by the next
	// growth: tables grow round after round, and a fresh array of
	// megabytes costs its page faults on every query.
	spare []idSlot
}

type idSlot struct {
	id  int64
	idx int32 // index+1; 0 marks an empty slot, so any id can be a key
}

// alloc gives t room for n ids at most half full, and no ids. It reuses
// t's array when that is large enough.
func (t *idTable) alloc(n int) {
	size := max(16, 1<<bits.Len(uint(2*n)))
	if cap(t.slots) >= size {
		t.slots = t.slots[:size]
		clear(t.slots)
	} else {
		t.slots = make([]idSlot, size)
	}
	t.shift, t.n = uint(64-bits.TrailingZeros(uint(size))), 0
}

func (t *idTable) home(id int64) uint64 { return (uint64(id) * 0x9e3779b97f4a7c15) >> t.shift }

// index returns id's index, giving it next if id is new (added reports so).
func (t *idTable) index(id int64, next int32) (i int32, added bool) {
	mask := uint64(len(t.slots) - 1)
	for h := t.home(id); ; h = (h + 1) & mask {
		s := &t.slots[h]
		switch {
		case s.idx == 0:
			s.id, s.idx = id, next+1
			if t.n++; 2*t.n > len(t.slots) { // keep probe runs short: at most half full
				t.reserve(len(t.slots) / 2)
			}
			return next, true
		case s.id == id:
			return s.idx - 1, false
		}
	}
}

// mustGrow reports whether more new ids would make t grow.
func (t *idTable) mustGrow(more int) bool { return 2*(t.n+more) > len(t.slots) }

// reserve makes room for more new ids without growing in between.
func (t *idTable) reserve(more int) {
	if !t.mustGrow(more) {
		return
	}
	old, n := t.slots, t.n
	t.slots, t.spare = t.spare, old // not old's array: it is read below
	t.alloc(n + more)
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.idx == 0 {
			continue
		}
		h := t.home(s.id)
		for t.slots[h].idx != 0 {
			h = (h + 1) & mask
		}
		t.slots[h] = s
	}
	t.n = n
}

// kwScratch is a query's per-chunk state, kept for the next query: a slow
// query's is megabytes, and allocating it anew each time made allocation
// and garbage collection a quarter of the query's CPU.
type kwScratch struct {
	docs      idTable
	ids, kbOf []int64
	scores    []float64
	pending   []int32
}

var kwScratchPool = sync.Pool{New: func() any { return new(kwScratch) }}

// maxPooledIDs bounds what an idle pooled scratch holds (16 MiB of tables):
// one query over a huge term list should not pin its memory for good.
const maxPooledIDs = 1 << 20

// useScratch takes a pooled scratch for ks.
func (ks *kwSearch) useScratch(ids int) {
	sc := kwScratchPool.Get().(*kwScratch)
	ks.scratch = sc
	ks.docs = &sc.docs
	ks.docs.alloc(ids)
	ks.ids, ks.kbOf, ks.scores, ks.pending = sc.ids[:0], sc.kbOf[:0], sc.scores[:0], sc.pending[:0]
}

// release returns ks's scratch to the pool; ks must not be used after.
func (ks *kwSearch) release() {
	sc := ks.scratch
	if sc == nil || cap(sc.docs.slots)+cap(sc.docs.spare) > maxPooledIDs {
		return
	}
	sc.ids, sc.kbOf, sc.scores, sc.pending = ks.ids[:0], ks.kbOf[:0], ks.scores[:0], ks.pending[:0]
	ks.scratch, ks.docs = nil, nil
	kwScratchPool.Put(sc)
}
