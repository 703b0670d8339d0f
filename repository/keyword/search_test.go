package keyword

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/ragent-go/ragent/service"
)

func TestFold(t *testing.T) {
	got := Fold([]service.TermCount{{Term: "a", Count: 1}, {Term: "b"}, {Term: "a", Count: 2}})
	if want := []service.TermCount{{Term: "a", Count: 3}, {Term: "b", Count: 1}}; !slices.Equal(got, want) {
		t.Fatalf("Fold = %v, want %v", got, want)
	}
}

// TestSearchMatchesBruteForce runs a Search over an in-memory index (blocks,
// a tail, removed chunks, two knowledge bases) with the smallest and the
// default fetch budgets, and checks its top k against every posting
// scored by the formula.
func TestSearchMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const k1, b = 1.2, 0.75
	for trial := range 40 {
		terms := []service.TermCount{{Term: "x", Count: 1}, {Term: "y", Count: 2}, {Term: "z", Count: 1}}[:1+r.IntN(3)]
		type key struct {
			kb   int64
			term string
		}
		blocks := map[key][][]Posting{} // each term's postings, in blocks
		tail := map[key][]Posting{}
		dead := map[int64]bool{}
		dl := map[int64]int32{}
		kbOf := map[int64]int64{}
		var chunks, termTotal int64
		for id := int64(1); id <= 600; id++ {
			kb := 1 + id%2
			kbOf[id], dl[id] = kb, int32(1+r.IntN(300))
			if r.IntN(10) == 0 {
				dead[id] = true
			} else {
				chunks, termTotal = chunks+1, termTotal+int64(dl[id])
			}
		}
		for _, tc := range terms {
			for kb := int64(1); kb <= 2; kb++ {
				var inBlocks []Posting
				for id := kb; id <= 600; id += 2 {
					if r.IntN(3) != 0 {
						continue
					}
					p := Posting{ID: id, TF: int32(1 + r.IntN(5)), DL: dl[id]}
					if id > 500 && !dead[id] {
						tail[key{kb, tc.Term}] = append(tail[key{kb, tc.Term}], p)
					} else {
						inBlocks = append(inBlocks, p)
					}
				}
				blocks[key{kb, tc.Term}] = SplitBlocks(inBlocks, r.IntN(2) == 0)
			}
		}
		// The reference: every live posting scored.
		df := map[string]float64{}
		for k, bs := range blocks {
			for _, blk := range bs {
				for _, p := range blk {
					if !dead[p.ID] {
						df[k.term]++
					}
				}
			}
		}
		for k, ps := range tail {
			df[k.term] += float64(len(ps))
		}
		m := bm25{k1: k1, b: b, avgdl: max(float64(termTotal)/float64(chunks), 1)}
		score := map[int64]float64{}
		for _, tc := range terms {
			w := float64(tc.Count) * m.idf(float64(chunks), df[tc.Term])
			for kb := int64(1); kb <= 2; kb++ {
				all := slices.Concat(tail[key{kb, tc.Term}])
				for _, blk := range blocks[key{kb, tc.Term}] {
					all = append(all, blk...)
				}
				for _, p := range all {
					if !dead[p.ID] {
						score[p.ID] += m.termScore(w, p.TF, p.DL)
					}
				}
			}
		}
		var want []Scored
		for id, s := range score {
			want = append(want, Scored{Score: s, ID: id})
		}
		sort.Slice(want, func(i, j int) bool { return worse(want[j], want[i]) })
		limit := 1 + r.IntN(20)
		want = want[:min(limit, len(want))]

		for _, policy := range []Policy{{First: 1}, DefaultPolicy} {
			ks := NewSearch(terms, k1, b, limit)
			payload := map[[3]any][]byte{}
			for k, bs := range blocks {
				var heads []byte
				for _, blk := range bs {
					h, p := EncodeBlock(blk)
					heads = append(heads, h...)
					payload[[3]any{k.kb, k.term, blk[len(blk)-1].ID}] = p
				}
				if len(heads) > 0 {
					if err := ks.AddHeads(k.kb, k.term, heads); err != nil {
						t.Fatal(err)
					}
				}
				for _, blk := range bs {
					for _, p := range blk {
						if dead[p.ID] {
							ks.AddDead(k.term, p.ID)
						}
					}
				}
			}
			for k, ps := range tail {
				for _, p := range ps {
					ks.AddTail(k.kb, k.term, p)
				}
			}
			ks.SetStats(chunks, termTotal)
			ks.Start()
			for round := 0; ; round++ {
				need := ks.Needed(policy, round)
				if len(need) == 0 {
					break
				}
				ks.GrowFor(need)
				for _, blk := range need {
					if _, err := ks.AddPayload(blk.KB(), blk.Term(), payload[[3]any{blk.KB(), blk.Term(), blk.Last()}]); err != nil {
						t.Fatal(err)
					}
				}
				ks.EndRound(need)
			}
			got := ks.Ranked()
			ks.Release()
			same := func(a, b Scored) bool { return a.ID == b.ID && math.Abs(a.Score-b.Score) <= 1e-9*math.Abs(b.Score) }
			if !slices.EqualFunc(got, want, same) {
				t.Fatalf("trial %d, policy %+v: got %v, want %v", trial, policy, got, want)
			}
		}
	}
}

func TestPlanRunsAndRewrite(t *testing.T) {
	block := func(ids ...int64) []Posting {
		out := make([]Posting, len(ids))
		for i, id := range ids {
			out[i] = Posting{ID: id, TF: 1, DL: 10}
		}
		return out
	}
	old := [][]Posting{block(1, 2, 3), block(10, 11, 12), block(20, 21, 22)}
	var heads []Head
	var payloads [][]byte
	for _, blk := range old {
		h, p := EncodeBlock(blk)
		hs, err := DecodeHeads(h)
		if err != nil {
			t.Fatal(err)
		}
		heads, payloads = append(heads, hs...), append(payloads, p)
	}
	// 5 goes to the second block (the first whose last id is ≥ 5), 30
	// past the end to the last; 11 is removed from the second; the first
	// block is untouched.
	added := block(5, 30)
	dead := map[int64]bool{11: true}
	runs := PlanRuns(heads, added, dead)
	if len(runs) != 1 || runs[0].From != 1 || runs[0].To != 2 || !runs[0].AtTheEnd || len(runs[0].Added) != 2 {
		t.Fatalf("runs %+v, want one of blocks 1..2 at the end with both added", runs)
	}
	out, err := Rewrite(runs[0], payloads[1:3], dead)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, blk := range out {
		for _, p := range blk {
			ids = append(ids, p.ID)
		}
	}
	if want := []int64{5, 10, 12, 20, 21, 22, 30}; !slices.Equal(ids, want) {
		t.Fatalf("rewritten ids %v, want %v", ids, want)
	}
	if runs := PlanRuns(nil, added, nil); len(runs) != 1 || runs[0].To != -1 || !runs[0].AtTheEnd {
		t.Fatalf("a term without blocks: %+v", runs)
	}
	if runs := PlanRuns(heads, nil, map[int64]bool{15: true}); len(runs) != 0 {
		t.Fatalf("a removed chunk between blocks touches none: %+v", runs)
	}
}

func TestSplitBlocks(t *testing.T) {
	ps := make([]Posting, 2*BlockSize+1)
	for i := range ps {
		ps[i].ID = int64(i)
	}
	sizes := func(bs [][]Posting) []int {
		var out []int
		for _, b := range bs {
			out = append(out, len(b))
		}
		return out
	}
	if got := sizes(SplitBlocks(ps, true)); !slices.Equal(got, []int{BlockSize, BlockSize, 1}) {
		t.Fatalf("at the end: %v, want full blocks", got)
	}
	if got := sizes(SplitBlocks(ps, false)); !slices.Equal(got, []int{85, 86, 86}) {
		t.Fatalf("inside: %v, want equal blocks", got)
	}
}
