package keyword

import (
	"cmp"
	"slices"
	"sort"
)

// Run is a stretch of a term's consecutive blocks that compaction rewrites
// because postings are added to them or removed from them.
type Run struct {
	From, To int       // block indexes, inclusive; From > To for a term without blocks
	Added    []Posting // the tail postings that go into these blocks
	AtTheEnd bool      // the run ends at the term's last block
}

// PlanRuns returns the runs of a term's blocks (heads, in id order) that
// gain added or lose a removed chunk of dead. A posting goes to the first
// block whose last id is at least its id, or to the last block; blocks
// touched one after another form one run. A term without blocks gets one
// run of everything added.
func PlanRuns(heads []Head, added []Posting, dead map[int64]bool) []Run {
	if len(heads) == 0 {
		if len(added) == 0 {
			return nil
		}
		return []Run{{From: 0, To: -1, Added: added, AtTheEnd: true}}
	}
	touched := make([]bool, len(heads))
	owner := func(id int64) int {
		i := sort.Search(len(heads), func(i int) bool { return heads[i].Last >= id })
		return min(i, len(heads)-1)
	}
	addedTo := map[int][]Posting{}
	for _, p := range added {
		i := owner(p.ID)
		touched[i], addedTo[i] = true, append(addedTo[i], p)
	}
	for id := range dead {
		if i := owner(id); heads[i].First <= id && id <= heads[i].Last {
			touched[i] = true
		}
	}
	var runs []Run
	for i := 0; i < len(heads); i++ {
		if !touched[i] {
			continue
		}
		r := Run{From: i}
		for ; i < len(heads) && touched[i]; i++ {
			r.Added = append(r.Added, addedTo[i]...)
		}
		r.To, r.AtTheEnd = i-1, i == len(heads)
		runs = append(runs, r)
	}
	return runs
}

// Rewrite returns the blocks that replace a run: the postings of its old
// blocks' payloads without dead chunks', and the run's added ones, in id
// order, cut by SplitBlocks.
func Rewrite(r Run, oldPayloads [][]byte, dead map[int64]bool) ([][]Posting, error) {
	merged := slices.Clone(r.Added)
	for _, payload := range oldPayloads {
		ps, err := DecodePostings(payload)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if !dead[p.ID] {
				merged = append(merged, p)
			}
		}
	}
	slices.SortFunc(merged, func(a, b Posting) int { return cmp.Compare(a.ID, b.ID) })
	return SplitBlocks(merged, r.AtTheEnd), nil
}

// SplitBlocks cuts sorted postings into blocks of at most BlockSize: full
// ones when they end the term's list, where later postings will be
// appended, otherwise as equal as possible.
func SplitBlocks(ps []Posting, atTheEnd bool) [][]Posting {
	if len(ps) == 0 {
		return nil
	}
	n := (len(ps) + BlockSize - 1) / BlockSize
	var out [][]Posting
	for i := 0; i < n; i++ {
		lo, hi := i*BlockSize, min((i+1)*BlockSize, len(ps))
		if !atTheEnd {
			lo, hi = i*len(ps)/n, (i+1)*len(ps)/n
		}
		out = append(out, ps[lo:hi])
	}
	return out
}
