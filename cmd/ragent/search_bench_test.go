package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/text"
)

// BenchmarkSearchOverhead measures what /search adds to the two SQL queries
// it runs: in one run, on one in-process instance over a synthetic corpus
// ingested through the pipeline, each query goes once through HTTP /search
// (auth, JSON, knowledge-base lookup, embedding, both searches, fusion) and
// once as the same KeywordSearch + VectorSearch issued directly on the store,
// interleaved so both see the same machine load. It reports both p50s and
// their ratio (target ≤ 1.3).
//
//	go test ./cmd/ragent -run '^$' -bench SearchOverhead -benchtime 400x
func BenchmarkSearchOverhead(b *testing.B) {
	const docs = 3000
	cfg := testConfig(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Not start: its logger turns to debug under -v, which would weigh on
	// the measured HTTP path.
	a, err := newApp(ctx, cfg, newLogger(io.Discard, "error"))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln) }()
	defer func() { cancel(); <-done }()
	base := "http://" + ln.Addr().String()

	// A corpus with a Zipf-like vocabulary, so common and rare terms mix as
	// in real text.
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 5000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%dx%s", i, strings.Repeat("q", i%3))
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 2, uint64(len(vocab)-1))
	words := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = vocab[zipf.Uint64()]
		}
		return strings.Join(parts, " ")
	}
	name := "bench"
	size := 2048
	kb, err := a.kbs.Create(ctx, service.SystemPrincipal(), admin.KnowledgeBaseInput{Name: &name, ChunkSize: &size})
	if err != nil {
		b.Fatal(err)
	}
	for i := range docs {
		if _, err := a.ingestSvc.Upload(ctx, service.SystemPrincipal(), kb.ID, fmt.Sprintf("d%d.txt", i), strings.NewReader(words(150+rng.IntN(150)))); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := eval.DocumentStats(ctx, a.ingestSvc, kb.ID)
		if err != nil {
			b.Fatal(err)
		}
		if st.Ready+st.Failed == docs {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("ingestion did not finish: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}

	token := (&instance{url: base}).login(b, "admin", "admin-password")
	embedder, err := llm.NewEmbedder(llmConfig(cfg, nil))
	if err != nil {
		b.Fatal(err)
	}
	queries := make([]string, 64)
	for i := range queries {
		queries[i] = words(4 + rng.IntN(6))
	}
	direct := func(q string) {
		if _, err := a.store.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kb.ID},
			Terms: retrieve.TermCounts(text.Tokenize(q)), K1: 0.9, B: 0.4, Limit: 50}); err != nil {
			b.Fatal(err)
		}
		vecs, err := embedder.Embed(ctx, service.EmbedQuery, []string{q})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.store.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{kb.ID}, Space: kb.Space().Key(),
			Vector: vecs[0], Limit: 50}); err != nil {
			b.Fatal(err)
		}
	}
	body := func(q string) []byte {
		buf, _ := json.Marshal(map[string]any{"query": q, "knowledgeBaseIds": []string{kb.ID.String()}, "topK": 10, "mode": "hybrid"})
		return buf
	}
	viaHTTP := func(q []byte) {
		req, _ := http.NewRequest("POST", base+"/api/v1/search", bytes.NewReader(q))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("/search: %d", resp.StatusCode)
		}
	}
	// Warm both paths (connections, plan caches) before measuring.
	for _, q := range queries[:8] {
		viaHTTP(body(q))
		direct(q)
	}

	var httpLat, sqlLat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		q := queries[i%len(queries)]
		qb := body(q)
		t0 := time.Now()
		viaHTTP(qb)
		t1 := time.Now()
		direct(q)
		t2 := time.Now()
		httpLat, sqlLat = append(httpLat, t1.Sub(t0)), append(sqlLat, t2.Sub(t1))
	}
	b.StopTimer()
	slices.Sort(httpLat)
	slices.Sort(sqlLat)
	h, s := eval.Percentile(httpLat, 0.5), eval.Percentile(sqlLat, 0.5)
	b.ReportMetric(ms(h), "search_p50_ms")
	b.ReportMetric(ms(s), "sql_p50_ms")
	b.ReportMetric(float64(h)/float64(s), "ratio")
	b.Logf("docs=%d queries=%d /search p50=%.2fms p99=%.2fms; direct SQL p50=%.2fms p99=%.2fms; ratio %.2f",
		docs, len(httpLat), ms(h), ms(eval.Percentile(httpLat, 0.99)), ms(s), ms(eval.Percentile(sqlLat, 0.99)), float64(h)/float64(s))
}
