package repository

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/scalebench"
	"github.com/ragent-go/ragent/repository/keyword"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/text"
)

// BenchmarkKeywordFetchPolicy compares block fetch policies on the scale
// benchmark's English-like corpus (internal/scalebench, seed 1, bulk-loaded
// through its Loader as scripts/scalebench.sh does) and its queries, as
// retrieval issues them (k1 0.9, b 0.4, 50 candidates): every query runs
// under every policy in turn, in a rotating order, in the same process, so
// the ratios hold whatever the machine's load. It prints, per policy,
// p50/p99 latency, blocks fetched, round trips and postings decoded per
// query, and fails if two policies return different results.
//
//	RAGENT_REQUIRE_SERVICES=1 RAGENT_BENCH_CHUNKS=200000 RAGENT_BENCH_QUERIES=1000 \
//	RAGENT_BENCH_DATABASE_URL=postgres://… go test -run '^$' -bench KeywordFetchPolicy -benchtime 1x -timeout 60m ./repository/
//
// With RAGENT_BENCH_DATABASE_URL the corpus is loaded once and reused.
func BenchmarkKeywordFetchPolicy(b *testing.B) {
	n, nq := benchEnvInt(b, "RAGENT_BENCH_CHUNKS", 50000), benchEnvInt(b, "RAGENT_BENCH_QUERIES", 1000)
	ctx := context.Background()
	s := benchStore(b)
	gen, err := scalebench.NewGenerator(scalebench.Spec{Lang: "en", Docs: n, Queries: nq, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	kb := policyBenchCorpus(b, s, gen, n)
	var queries []service.KeywordQuery
	for i := range nq {
		q, _ := gen.QueryAt(i, n)
		terms := retrieve.TermCounts(text.Tokenize(q))
		if len(terms) > 0 {
			queries = append(queries, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb}, Terms: terms,
				K1: retrieve.DefaultK1, B: retrieve.DefaultB, Limit: 50})
		}
	}
	policies := []struct {
		name string
		p    keyword.Policy
	}{
		{"64×8 all", keyword.Policy{First: 64, Shift: 3}}, // main's policy before this benchmark
		{"64×2 all", keyword.Policy{First: 64, Shift: 1}},
		{"64×8 ess", keyword.Policy{First: 64, Shift: 3, EssentialOnly: true}},
		{"64×2 ess", keyword.Policy{First: 64, Shift: 1, EssentialOnly: true}},
		{"32×2 ess", keyword.Policy{First: 32, Shift: 1, EssentialOnly: true}},
		{"16×2 ess", keyword.Policy{First: 16, Shift: 1, EssentialOnly: true}},
		{"default", keyword.DefaultPolicy},
	}
	type record struct {
		lat   []time.Duration
		stats []keyword.Stats
	}
	recs := make([]record, len(policies))
	for _, q := range queries { // warm the buffers and the connections
		if _, err := s.KeywordSearch(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for qi, q := range queries {
			var first []service.SearchResult
			for j := range policies {
				pi := (qi + j) % len(policies)
				var st keyword.Stats
				t0 := time.Now()
				got, err := s.keywordSearchWith(ctx, q, policies[pi].p, &st)
				if err != nil {
					b.Fatal(err)
				}
				recs[pi].lat = append(recs[pi].lat, time.Since(t0))
				recs[pi].stats = append(recs[pi].stats, st)
				if j == 0 {
					first = got
				} else if !sameResults(first, got) {
					b.Fatalf("query %v: policy %s returns other results", q.Terms, policies[pi].name)
				}
			}
		}
	}
	b.StopTimer()
	base := recs[0]
	bp50, bp99 := scalebench.Percentiles(base.lat)
	bBlocks := meanOf(base.stats, func(s keyword.Stats) int { return s.Blocks })
	fmt.Printf("%d chunks, %d queries; per query: latency p50 / p99 (ratio to %s), blocks mean / p50 / p99 / max (ratio of means), rounds mean / max, postings decoded mean\n",
		n, len(queries), policies[0].name)
	for i, r := range recs {
		p50, p99 := scalebench.Percentiles(r.lat)
		blocks := meanOf(r.stats, func(s keyword.Stats) int { return s.Blocks })
		fmt.Printf("%-9s %6.2f / %6.2f ms (%.2f / %.2f)  blocks %6.1f / %4d / %4d / %4d (%.2f)  rounds %.2f / %d  postings %.0f\n",
			policies[i].name, ms(p50), ms(p99), ms(p50)/ms(bp50), ms(p99)/ms(bp99),
			blocks, pct(r.stats, 50, func(s keyword.Stats) int { return s.Blocks }), pct(r.stats, 99, func(s keyword.Stats) int { return s.Blocks }),
			pct(r.stats, 100, func(s keyword.Stats) int { return s.Blocks }), blocks/bBlocks,
			meanOf(r.stats, func(s keyword.Stats) int { return s.Rounds }), pct(r.stats, 100, func(s keyword.Stats) int { return s.Rounds }),
			meanOf(r.stats, func(s keyword.Stats) int { return s.Postings }))
	}
	fmt.Printf("blocks per query under %s:", policies[0].name)
	edges := []int{0, 64, 128, 256, 512, 1024}
	for i, lo := range edges {
		c := 0
		for _, st := range base.stats {
			if st.Blocks >= lo && (i == len(edges)-1 || st.Blocks < edges[i+1]) {
				c++
			}
		}
		fmt.Printf(" ≥%d: %d", lo, c)
	}
	fmt.Println()
}

// policyBenchCorpus returns the benchmark's knowledge base, loading the
// first n documents of gen into it unless a previous run did.
func policyBenchCorpus(b *testing.B, s *Store, gen *scalebench.Generator, n int) service.ID {
	ctx := context.Background()
	name := fmt.Sprintf("policy-bench-%d", n)
	var found []int64
	if err := s.db.Raw("SELECT id FROM knowledge_bases WHERE name = ? AND deleted_at IS NULL", name).Scan(&found).Error; err != nil {
		b.Fatal(err)
	}
	if len(found) == 1 {
		return service.ID(found[0])
	}
	kb := &service.KnowledgeBase{ID: newID(), Name: name, EmbeddingModel: "m", EmbeddingDim: 4, ChunkSize: 512,
		ChunkOverlap: 64, VectorWeight: 1}
	if err := s.CreateKnowledgeBase(ctx, kb); err != nil {
		b.Fatal(err)
	}
	var space string
	if err := s.db.Raw("SELECT embedding_space FROM knowledge_bases WHERE id = ?", int64(kb.ID)).Scan(&space).Error; err != nil {
		b.Fatal(err)
	}
	l := &scalebench.Loader{Store: s, IDs: &counterIDs{next: int64(kb.ID)}, Embedder: fixedEmbedder{}, Gen: gen, KB: kb.ID,
		Space: space}
	st, err := l.Load(ctx, 0, n)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	for more := true; more; {
		if more, err = s.CompactKeywords(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.ShrinkKeywordTail(ctx, 0); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Exec("VACUUM ANALYZE").Error; err != nil {
		b.Fatal(err)
	}
	fmt.Printf("loaded %d chunks (%d postings) in %s, compacted in %s\n", st.Chunks, st.Postings,
		st.Elapsed.Round(time.Second), time.Since(t0).Round(time.Second))
	return kb.ID
}

// counterIDs hands out increasing ids from next: the loader's chunk ids
// ascend as the ingestion pipeline's snowflake ids do.
type counterIDs struct{ next int64 }

func (c *counterIDs) NextID() (service.ID, error) {
	return service.ID(atomic.AddInt64(&c.next, 1)), nil
}

// fixedEmbedder gives every text the same vector: the benchmark times
// keyword search only.
type fixedEmbedder struct{}

func (fixedEmbedder) Embed(_ context.Context, _ service.EmbedKind, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0, 0, 0}
	}
	return out, nil
}
func (fixedEmbedder) Model() string { return "m" }
func (fixedEmbedder) Dim() int      { return 4 }

// sameResults compares scores position by position: the policies add a
// chunk's term scores in different orders, so the last bits may differ and
// exact ties may be broken differently.
func sameResults(a, b []service.SearchResult) bool {
	return slices.EqualFunc(a, b, func(x, y service.SearchResult) bool { return closeTo(x.Score, y.Score) })
}

func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return n
}

func meanOf(sts []keyword.Stats, f func(keyword.Stats) int) float64 {
	sum := 0
	for _, s := range sts {
		sum += f(s)
	}
	return float64(sum) / float64(max(len(sts), 1))
}

// pct is the p-th percentile (nearest rank) of f over sts.
func pct(sts []keyword.Stats, p int, f func(keyword.Stats) int) int {
	v := make([]int, len(sts))
	for i, s := range sts {
		v[i] = f(s)
	}
	slices.Sort(v)
	return v[min(len(v)-1, len(v)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
