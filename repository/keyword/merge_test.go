package keyword

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// merge agrees with summing every run into a map, over several rounds that
// reuse the scratch arrays, with chunks of several knowledge bases whose ids
// interleave.
func TestMergeCands(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	ks := &Search{}
	ks.useScratch()
	defer ks.Release()
	type key struct{ kb, id int64 }
	ref := map[key]float64{}
	for round := range 20 {
		var runs [][]cand
		for range r.IntN(6) {
			var run []cand
			for id := int64(r.IntN(10)); id < 400; id += 1 + int64(r.IntN(30)) {
				c := cand{kb: int64(1 + r.IntN(3)), id: id, score: float64(r.IntN(100)) / 8}
				run = append(run, c)
			}
			slices.SortFunc(run, compareCands)
			run = slices.CompactFunc(run, func(a, b cand) bool { return compareCands(a, b) == 0 })
			for _, c := range run {
				ref[key{c.kb, c.id}] += c.score
			}
			runs = append(runs, run)
		}
		ks.merge(runs)
		if !slices.IsSortedFunc(ks.cands, compareCands) || len(ks.cands) != len(ref) {
			t.Fatalf("round %d: %d candidates (sorted: %v), want %d", round, len(ks.cands),
				slices.IsSortedFunc(ks.cands, compareCands), len(ref))
		}
		for _, c := range ks.cands {
			if want := ref[key{c.kb, c.id}]; c.score != want {
				t.Fatalf("round %d: chunk %d/%d scores %g, want %g", round, c.kb, c.id, c.score, want)
			}
		}
	}
}

func compareCands(a, b cand) int {
	return cmp.Or(cmp.Compare(a.kb, b.kb), cmp.Compare(a.id, b.id))
}
