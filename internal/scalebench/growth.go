package scalebench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Growth compares keyword search at the largest size with the smallest in
// one window of time. The sizes' own measurements are half an hour apart
// (the largest load runs between them) on a shared machine whose speed
// drifts by a third over such spans, more than the ratio's margin; here a
// knowledge base holding the smallest size's corpus sits beside the
// largest, and passes over the two sizes' queries alternate, so both see
// the same machine. Whole passes alternate, as each size is timed alone;
// alternating query by query measured the same (BENCHMARKS.md, runs
// 14–15). The small knowledge base is somewhat slower beside a large one
// than in a database of its own (its rows sit in larger tables), which
// flatters Ratio a little: the script prints each size's own p50 too.
type Growth struct {
	BaselineSize int       `json:"baseline_size"` // chunks in the baseline knowledge base
	Passes       int       `json:"passes"`        // timed passes over each size's queries
	Baseline     LatencyMS `json:"baseline"`      // keyword on the store, the smallest size's queries
	Largest      LatencyMS `json:"largest"`       // keyword on the store, the largest size's queries
	Ratio        float64   `json:"ratio"`         // Largest.P50 / Baseline.P50
}

// timeGrowth loads the smallest size's corpus into env.Baseline, then
// times keyword search on the store over both knowledge bases: one untimed
// pass over each size's queries, then opt.GrowthPasses timed ones each,
// the sizes alternating pass by pass (which goes first alternating too).
func timeGrowth(ctx context.Context, env Env, gen *Generator, opt Options) (*Growth, error) {
	if env.Baseline == 0 {
		return nil, errors.New("scalebench: growth passes need a baseline knowledge base (Env.Baseline)")
	}
	small, large := opt.Sizes[0], opt.Sizes[len(opt.Sizes)-1]
	fmt.Fprintf(opt.Log, "scalebench: loading %d chunks into the baseline knowledge base\n", small)
	loader := &Loader{Store: env.Store, IDs: env.IDs, Embedder: env.Embedder, Gen: gen, KB: env.Baseline, Space: env.Space}
	if _, err := loader.Load(ctx, 0, small); err != nil {
		return nil, err
	}
	if err := WaitSearchable(ctx, env.Ingester, env.Baseline); err != nil {
		return nil, err
	}
	if err := env.settle(ctx); err != nil {
		return nil, err
	}
	if err := env.Store.SettleKeywords(ctx); err != nil {
		return nil, err
	}
	if err := env.Store.Vacuum(ctx); err != nil {
		return nil, err
	}
	baseline := &growthSide{queries: gen.Queries(opt.Queries, small), search: InProcess(env.Searcher, service.SystemPrincipal(), env.Baseline)}
	largest := &growthSide{queries: gen.Queries(opt.Queries, large), search: InProcess(env.Searcher, service.SystemPrincipal(), env.KB)}
	sides := [2]*growthSide{baseline, largest}
	fmt.Fprintf(opt.Log, "scalebench: timing %d and %d chunks side by side, %d passes\n", small, large, opt.GrowthPasses)
	for pass := 0; pass <= opt.GrowthPasses; pass++ {
		for j := range sides {
			sd := sides[(pass+j)%2]
			for i := range sd.queries {
				if err := sd.run(ctx, i, pass > 0); err != nil {
					return nil, err
				}
			}
		}
	}
	g := &Growth{BaselineSize: small, Passes: opt.GrowthPasses, Baseline: baseline.latency(), Largest: largest.latency()}
	g.Ratio = g.Largest.P50 / g.Baseline.P50
	return g, nil
}

// growthSide is one knowledge base of timeGrowth with its queries.
type growthSide struct {
	queries []BenchQuery
	search  SearchFunc
	lat     []time.Duration
	hits    int
}

// run searches query i, recording its time and hit when timed.
func (s *growthSide) run(ctx context.Context, i int, timed bool) error {
	q := s.queries[i]
	start := time.Now()
	res, err := s.search(ctx, q.Text, service.SearchKeyword)
	if err != nil {
		return fmt.Errorf("scalebench: growth %s: %w", q.ID, err)
	}
	if timed {
		s.lat = append(s.lat, time.Since(start))
		if slices.Contains(res, q.Source) {
			s.hits++
		}
	}
	return nil
}

func (s *growthSide) latency() LatencyMS { return summarize(s.lat, s.hits).inMS() }
