package keyword

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSegmentsMatchAnIDByIDSweep checks segments against their definition:
// the maximal id ranges over which the same non-empty set of unfetched
// blocks covers every id, found here by visiting every id.
func TestSegmentsMatchAnIDByIDSweep(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 500 {
		terms := 1 + r.IntN(6)
		byTerm := make([][]*Block, terms)
		var maxID int64
		for ti := range byTerm {
			id := int64(r.IntN(5))
			for range r.IntN(12) {
				first := id + 1 + int64(r.IntN(6)) // gaps, and blocks that start right after the previous one
				last := first + int64(r.IntN(8))   // one-id blocks too
				byTerm[ti] = append(byTerm[ti], &Block{term: ti, head: Head{First: first, Last: last},
					ub: float64(r.IntN(1000)) / 7, fetched: r.IntN(4) == 0})
				id, maxID = last, max(maxID, last)
			}
		}
		type want struct {
			lo, hi int64
			blocks []*Block
		}
		var wants []want
		for id := int64(0); id <= maxID+1; id++ {
			var cover []*Block
			for _, bs := range byTerm {
				for _, b := range bs {
					if !b.fetched && b.head.First <= id && id <= b.head.Last {
						cover = append(cover, b)
					}
				}
			}
			switch {
			case len(cover) == 0:
			case len(wants) > 0 && wants[len(wants)-1].hi == id-1 && slices.Equal(wants[len(wants)-1].blocks, cover):
				wants[len(wants)-1].hi = id
			default:
				wants = append(wants, want{id, id, cover})
			}
		}
		got := segments(byTerm, 0)
		if len(got) != len(wants) {
			t.Fatalf("trial %d: %d segments, want %d", trial, len(got), len(wants))
		}
		for i, g := range got {
			w := wants[i]
			ub := 0.0
			for _, b := range w.blocks {
				ub += b.ub
			}
			if g.lo != w.lo || g.hi != w.hi || !slices.Equal(g.blocks, w.blocks) || math.Abs(g.ub-ub) > 1e-9*ub {
				t.Fatalf("trial %d segment %d: [%d, %d] with %d blocks (ub %g), want [%d, %d] with %d (ub %g)",
					trial, i, g.lo, g.hi, len(g.blocks), g.ub, w.lo, w.hi, len(w.blocks), ub)
			}
		}
	}
}
