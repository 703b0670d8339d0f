package retrieve

import (
	"math"
	"slices"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// scored builds a list of (chunk id, score) pairs.
func scored(pairs ...float64) []service.SearchResult {
	out := make([]service.SearchResult, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, service.SearchResult{ChunkID: service.ID(pairs[i]), Score: pairs[i+1]})
	}
	return out
}

// fusionCase is the two lists of a hybrid search, the vector weight and the
// chunk order the fusion must return.
type fusionCase struct {
	name            string
	keyword, vector []service.SearchResult
	w               float64
	want            []int
}

func testFusionOrder(t *testing.T, fuse func(keyword, vector []service.SearchResult, w float64) []service.SearchResult, tests []fusionCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := order(fuse(tt.keyword, tt.vector, tt.w)); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFuseScores(t *testing.T) {
	testFusionOrder(t, FuseScores, []fusionCase{
		// RRF would tie 1 and 2 (each first in one list); the scores say
		// chunk 2 is far ahead in the vector list and barely behind 1 in
		// the keyword list.
		{"margins count, not only ranks", scored(1, 10, 2, 9.5, 3, 1), scored(2, 0.90, 1, 0.70, 3, 0.69), 1, []int{2, 1, 3}},
		{"zero vector weight is keyword order", scored(1, 3, 2, 2), scored(2, 0.9, 4, 0.8), 0, []int{1, 2}},
		{"keyword only", scored(5, 2, 6, 1), nil, 1, []int{5, 6}},
		{"vector only", nil, scored(7, 0.8, 8, 0.7), 1, []int{7, 8}},
		{"a list of one normalizes to 1", scored(9, 0.3), scored(10, 0.8, 9, 0.75, 11, 0.7), 1, []int{9, 10, 11}},
		{"heavy vector weight follows vector", scored(1, 2, 2, 1), scored(2, 0.9, 1, 0.8), 3, []int{2, 1}},
	})
}

func TestFuseScoresValues(t *testing.T) {
	// keyword: 1 → 1, 2 → 0; vector: 2 → 1, 1 → 0.5, 3 → 0; w = 1 halves both.
	got := FuseScores(scored(1, 4, 2, 2), scored(2, 0.9, 1, 0.8, 3, 0.7), 1)
	want := map[service.ID]float64{1: 0.75, 2: 0.5, 3: 0}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for _, r := range got {
		if math.Abs(r.Score-want[r.ChunkID]) > 1e-9 {
			t.Errorf("chunk %d: score %v, want %v", r.ChunkID, r.Score, want[r.ChunkID])
		}
	}
}
