package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/text"
)

// TestBackendsRankAlike ingests one mixed English and Chinese corpus on the
// OpenSearch backend (which fills the Postgres keyword index too) and asks
// both backends the same keyword queries: they must find the same chunks
// in nearly the same order. What may differ is documented in docs/search-backends.md
// (Lucene stores chunk lengths in one byte), so near-ties can swap; the
// test holds the lists to nDCG@10 ≥ 0.99 against Postgres's order. Vector
// search (RAGENT_OPENSEARCH_VECTORS) is compared too: pgvector stores
// half-precision vectors and both indexes are approximate (HNSW), so its
// bar is 0.95.
func TestBackendsRankAlike(t *testing.T) {
	cfg := openSearchConfig(t, "")
	cfg.OpenSearchVectors = true
	in, c, kb := ingestEnv(t, cfg)
	rng := rand.New(rand.NewPCG(16, 1))
	english := strings.Fields("walrus glacier harbor lantern copper orchard thunder meadow falcon quartz " +
		"ribbon saddle tunnel velvet whistle anchor barley candle dagger ember fossil garnet hazel ivory " +
		"jasmine kettle ledger marble nectar oyster pepper quiver raven summit timber umber violet willow")
	chinese := strings.Fields("缓存 数据 过期 策略 集群 节点 副本 分片 索引 查询 权限 用户 文档 向量 检索 模型 服务 网络 日志 监控")
	word := func() string {
		// Zipf-like: low indexes are common.
		if rng.IntN(3) == 0 {
			return chinese[min(int(rng.ExpFloat64()*4), len(chinese)-1)]
		}
		return english[min(int(rng.ExpFloat64()*8), len(english)-1)]
	}
	var docs []docJSON
	for i := range 40 {
		var b strings.Builder
		for p := range 1 + rng.IntN(3) {
			if p > 0 {
				b.WriteString("\n\n")
			}
			for range 5 + rng.IntN(40) {
				b.WriteString(word())
				b.WriteByte(' ')
			}
		}
		docs = append(docs, c.uploadAccepted(kb, fmt.Sprintf("doc%d.txt", i), []byte(b.String())))
	}
	for _, d := range docs {
		c.waitReady(d.ID)
	}
	kbID, err := service.ParseID(kb)
	if err != nil {
		t.Fatal(err)
	}
	pg, os := in.app.store, openSearchStore{Store: in.app.store, os: openSearchClient(t, cfg)}
	ctx := context.Background()
	// The OpenSearch backend does not keep Postgres's keyword index: it is
	// built here as a switch back to the Postgres backend would.
	if _, err := in.app.store.RebuildKeywordIndex(ctx, chunkTerms); err != nil {
		t.Fatal(err)
	}
	// both asks Postgres (want) and OpenSearch (got) the same search.
	both := func(search func(s searcher) ([]service.SearchResult, error)) (want, got []service.SearchResult) {
		t.Helper()
		want, err := search(pg)
		if err == nil {
			got, err = search(os)
		}
		if err != nil {
			t.Fatal(err)
		}
		return want, got
	}
	// holds fails the test unless OpenSearch's n lists of kind score a
	// mean nDCG@10 of at least bar.
	holds := func(kind string, sum float64, n int, bar float64) {
		t.Helper()
		if mean := sum / float64(n); mean < bar {
			t.Fatalf("OpenSearch's %s lists score nDCG@10 %.4f against Postgres's", kind, mean)
		} else {
			t.Logf("OpenSearch's %s lists score nDCG@10 %.4f against Postgres's (%d queries)", kind, mean, n)
		}
	}
	var sum float64
	const queries = 60
	for range queries {
		var parts []string
		for range 1 + rng.IntN(3) {
			parts = append(parts, word())
		}
		terms := retrieve.TermCounts(text.Tokenize(strings.Join(parts, " ")))
		q := service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kbID}, Terms: terms, K1: 0.9, B: 0.4, Limit: 10}
		sum += ndcgAgainst(both(func(s searcher) ([]service.SearchResult, error) { return s.KeywordSearch(ctx, q) }))
	}
	holds("keyword", sum, queries, 0.99)

	// Vector search: each document's first chunk vector as the query.
	sum = 0
	for _, d := range docs {
		id, _ := service.ParseID(d.ID)
		st, err := in.app.store.DocumentSearchState(ctx, id)
		if err != nil || len(st.Chunks) == 0 || st.Chunks[0].EmbeddingSpace == "" {
			t.Fatalf("state of %s: %+v %v", d.ID, st, err)
		}
		q := service.VectorQuery{KnowledgeBaseIDs: []service.ID{kbID}, Space: st.Chunks[0].EmbeddingSpace, Vector: st.Chunks[0].Embedding, Limit: 10}
		want, got := both(func(s searcher) ([]service.SearchResult, error) { return s.VectorSearch(ctx, q) })
		if len(got) == 0 || got[0].ChunkID != st.Chunks[0].ID {
			t.Fatalf("a chunk's own vector does not find it first: %+v", got)
		}
		sum += ndcgAgainst(want, got)
	}
	holds("vector", sum, len(docs), 0.95)
}

// searcher is what the parity test asks both backends.
type searcher interface {
	KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchResult, error)
	VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchResult, error)
}

// ndcgAgainst scores got with the chunks of want as relevant, graded by
// their rank there (the first of ten gains 10, the last 1).
func ndcgAgainst(want, got []service.SearchResult) float64 {
	if len(want) == 0 {
		if len(got) == 0 {
			return 1
		}
		return 0
	}
	gain := map[service.ID]float64{}
	for i, r := range want {
		gain[r.ChunkID] = float64(len(want) - i)
	}
	dcg := func(list []service.SearchResult) float64 {
		var s float64
		for i, r := range list {
			s += gain[r.ChunkID] / math.Log2(float64(i+2))
		}
		return s
	}
	return dcg(got) / dcg(want)
}
