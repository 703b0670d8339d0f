package keyword

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// DecodeHeads reads back what EncodeBlock wrote, heads end to end as the
// start query sends them, and refuses every truncation of them.
func TestDecodeHeadsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var (
		all  []byte
		want []Head
		ends = map[int]bool{} // where a head ends
	)
	id := int64(0)
	for range 50 {
		ps := make([]Posting, 1+r.IntN(BlockSize))
		for i := range ps {
			id += 1 + int64(r.IntN(1000))
			ps[i] = Posting{ID: id, TF: int32(1 + r.IntN(9)), DL: int32(1 + r.IntN(400))}
		}
		head, _ := EncodeBlock(ps)
		all = append(all, head...)
		ends[len(all)] = true
		want = append(want, Head{Last: ps[len(ps)-1].ID, First: ps[0].ID, N: len(ps), Impacts: Frontier(ps)})
	}
	got, err := DecodeHeads(all)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b Head) bool {
		return a.Last == b.Last && a.First == b.First && a.N == b.N && slices.Equal(a.Impacts, b.Impacts)
	}
	if !slices.EqualFunc(got, want, same) {
		t.Fatalf("decoded %d heads unlike the %d encoded", len(got), len(want))
	}
	// A head's impacts are its own: appending to one must not write into the next.
	got[0].Impacts = append(got[0].Impacts, Impact{99, 1})
	if !same(got[1], want[1]) {
		t.Fatal("appending to a head's impacts changed the next head")
	}
	if hs, err := DecodeHeads(nil); err != nil || len(hs) != 0 {
		t.Fatalf("no bytes: %v, %v", hs, err)
	}
	for n := range len(all) {
		if _, err := DecodeHeads(all[:n]); (err == nil) != (n == 0 || ends[n]) {
			t.Fatalf("the first %d bytes: %v", n, err)
		}
	}
}
