package repository

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// decodeHeads reads back what encodeBlock wrote, heads end to end as the
// start query sends them, and refuses every truncation of them.
func TestDecodeHeadsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var (
		all  []byte
		want []blockHead
		ends = map[int]bool{} // where a head ends
	)
	id := int64(0)
	for range 50 {
		ps := make([]posting, 1+r.IntN(blockSize))
		for i := range ps {
			id += 1 + int64(r.IntN(1000))
			ps[i] = posting{id: id, tf: int32(1 + r.IntN(9)), dl: int32(1 + r.IntN(400))}
		}
		head, _ := encodeBlock(ps)
		all = append(all, head...)
		ends[len(all)] = true
		want = append(want, blockHead{last: ps[len(ps)-1].id, first: ps[0].id, n: len(ps), impacts: frontier(ps)})
	}
	got, err := decodeHeads(all)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b blockHead) bool {
		return a.last == b.last && a.first == b.first && a.n == b.n && slices.Equal(a.impacts, b.impacts)
	}
	if !slices.EqualFunc(got, want, same) {
		t.Fatalf("decoded %d heads unlike the %d encoded", len(got), len(want))
	}
	// A head's impacts are its own: appending to one must not write into the next.
	got[0].impacts = append(got[0].impacts, impact{99, 1})
	if !same(got[1], want[1]) {
		t.Fatal("appending to a head's impacts changed the next head")
	}
	if hs, err := decodeHeads(nil); err != nil || len(hs) != 0 {
		t.Fatalf("no bytes: %v, %v", hs, err)
	}
	for n := range len(all) {
		if _, err := decodeHeads(all[:n]); (err == nil) != (n == 0 || ends[n]) {
			t.Fatalf("the first %d bytes: %v", n, err)
		}
	}
}
