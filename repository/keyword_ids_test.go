package repository

import (
	"math"
	"math/rand"
	"testing"
)

// The id table agrees with a Go map through several growths, for ids of
// every shape: zero, negative, the extremes, sequential and random.
func TestIDTable(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	tab, ref := &idTable{}, map[int64]int32{}
	tab.alloc(0)
	ids := []int64{0, -1, math.MinInt64, math.MaxInt64}
	for i := range int64(5000) {
		ids = append(ids, 1<<41+i, rng.Int63(), -rng.Int63())
	}
	for round := 0; round < 2; round++ {
		for _, id := range ids {
			want, seen := ref[id]
			if !seen {
				want = int32(len(ref))
				ref[id] = want
			}
			got, added := tab.index(id, int32(len(ref)-1))
			if got != want || added == seen {
				t.Fatalf("id %d: index %d added %v, want %d added %v", id, got, added, want, !seen)
			}
		}
	}
	if tab.n != len(ref) || 2*tab.n > len(tab.slots) {
		t.Fatalf("%d ids in %d slots, want %d at most half full", tab.n, len(tab.slots), len(ref))
	}
	// Reused for another query (as the pool does): empty, smaller, no old ids.
	tab.alloc(10)
	if len(tab.slots) != 32 || tab.n != 0 {
		t.Fatalf("reused table: %d slots, %d ids; want 32 and 0", len(tab.slots), tab.n)
	}
	// It grows again through the arrays it grew through before (the
	// spare and the current one, in turn): nothing of the first query
	// may show through.
	for i, id := range ids {
		if got, added := tab.index(id, int32(i)); got != int32(i) || !added {
			t.Fatalf("reused table: id %d has index %d (added %v), want %d", id, got, added, i)
		}
	}
	for i, id := range ids {
		if got, added := tab.index(id, -1); got != int32(i) || added {
			t.Fatalf("reused table, second pass: id %d has index %d (added %v), want %d", id, got, added, i)
		}
	}
}
