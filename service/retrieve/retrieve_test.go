package retrieve

import (
	"slices"
	"testing"

	"github.com/ragent-go/ragent/service"
)

func res(ids ...int) []service.SearchResult {
	out := make([]service.SearchResult, len(ids))
	for i, id := range ids {
		out[i] = service.SearchResult{ChunkID: service.ID(id)}
	}
	return out
}

func order(rs []service.SearchResult) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = int(r.ChunkID)
	}
	return out
}

func TestFuse(t *testing.T) {
	rrf := func(keyword, vector []service.SearchResult, w float64) []service.SearchResult {
		return Fuse(keyword, vector, w, 60)
	}
	testFusionOrder(t, rrf, []fusionCase{
		{"equal weights: agreement wins", res(1, 2, 3), res(3, 2, 4), 1, []int{3, 2, 1, 4}},
		{"zero vector weight is keyword order", res(1, 2, 3), res(3, 2, 4), 0, []int{1, 2, 3}},
		{"keyword only", res(5, 6), nil, 1, []int{5, 6}},
		{"vector only", nil, res(7, 8), 1, []int{7, 8}},
		{"heavy vector weight follows vector", res(1, 2), res(2, 1), 3, []int{2, 1}},
	})
}

func TestTermCounts(t *testing.T) {
	got := TermCounts([]string{"vpn", "setup", "vpn"})
	if want := []service.TermCount{{Term: "vpn", Count: 2}, {Term: "setup", Count: 1}}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
