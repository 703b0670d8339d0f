package keyword

// Policy says how many blocks each round trip of a keyword query may
// fetch: first in the first round, then 2^shift times the previous round's
// budget. A round takes the unfetched blocks of the segments with the
// highest bounds, and θ (the k-th exact score) rises after each round, so a
// smaller budget fetches fewer blocks that the final θ would have pruned,
// at the cost of more round trips.
type Policy struct {
	First int
	Shift int
	// EssentialOnly fetches, of a segment's blocks, only those that a
	// chunk needs to reach θ (highest bound first, until the rest's bounds
	// sum below θ), deferring the others to a later round; otherwise every
	// unfetched block of the segment is fetched at once.
	EssentialOnly bool
}

// DefaultPolicy is the policy KeywordSearch uses.
var DefaultPolicy = Policy{First: 64, Shift: 1, EssentialOnly: true}

// budget is the number of blocks round (from 0) may fetch; it saturates
// at 2^24 blocks, far beyond any term list.
func (p Policy) budget(round int) int {
	return p.First << min(p.Shift*round, 24)
}

// Stats records one keyword query's work, for the tests and the
// benchmark: round trips of block fetches, blocks fetched and postings
// decoded. A nil *Stats records nothing.
type Stats struct {
	Rounds   int
	Blocks   int
	Postings int
}

// AddRound records one round trip that fetched blocks and decoded postings.
func (st *Stats) AddRound(blocks, postings int) {
	if st == nil {
		return
	}
	st.Rounds++
	st.Blocks += blocks
	st.Postings += postings
}
