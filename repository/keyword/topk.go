package keyword

import (
	"container/heap"
	"math"
	"sort"
)

// topK keeps the k best (score, id) pairs: higher score first, then lower id.
type topK struct {
	k int
	h ScoredHeap
}

// ScoredHeap is a min-heap: its root is the worst of the kept pairs.
type ScoredHeap []Scored

func worse(a, b Scored) bool { return a.Score < b.Score || a.Score == b.Score && a.ID > b.ID }

func (h ScoredHeap) Len() int           { return len(h) }
func (h ScoredHeap) Less(i, j int) bool { return worse(h[i], h[j]) }
func (h ScoredHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ScoredHeap) Push(x any)        { *h = append(*h, x.(Scored)) }
func (h *ScoredHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newTopK(k int) *topK { return &topK{k: k} }

func (t *topK) offer(score float64, id int64) {
	s := Scored{score, id}
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
	return t.h[0].Score
}

func (t *topK) sorted() []Scored {
	out := append([]Scored(nil), t.h...)
	sort.Slice(out, func(i, j int) bool { return worse(out[j], out[i]) })
	return out
}
