package repository

// fetchPolicy says how many blocks each round trip of a keyword query may
// fetch: first in the first round, then 2^shift times the previous round's
// budget. A round takes the unfetched blocks of the segments with the
// highest bounds, and θ (the k-th exact score) rises after each round, so a
// smaller budget fetches fewer blocks that the final θ would have pruned,
// at the cost of more round trips.
type fetchPolicy struct {
	first int
	shift int
	// essentialOnly fetches, of a segment's blocks, only those that a
	// chunk needs to reach θ (highest bound first, until the rest's bounds
	// sum below θ), deferring the others to a later round; otherwise every
	// unfetched block of the segment is fetched at once.
	essentialOnly bool
}

// defaultFetch is the policy KeywordSearch uses.
var defaultFetch = fetchPolicy{first: 64, shift: 1, essentialOnly: true}

// budget is the number of blocks round (from 0) may fetch; it saturates
// at 2^24 blocks, far beyond any term list.
func (p fetchPolicy) budget(round int) int {
	return p.first << min(p.shift*round, 24)
}

// kwStats records one keyword query's work, for the tests and the
// benchmark: round trips of block fetches, blocks fetched and postings
// decoded. A nil *kwStats records nothing.
type kwStats struct {
	rounds   int
	blocks   int
	postings int
}

func (st *kwStats) addRound(blocks, postings int) {
	if st == nil {
		return
	}
	st.rounds++
	st.blocks += blocks
	st.postings += postings
}
