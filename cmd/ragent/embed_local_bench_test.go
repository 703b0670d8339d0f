package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/internal/testenv"
)

// BenchmarkLocalQueryUnderBulkIngest is BenchmarkQueryEmbeddingUnderBulkIngest
// against the real local model (scripts/services.sh start embedder): /search
// in hybrid mode, idle and then while a bulk ingest embeds through the same
// instance. Document calls go through an in-test reverse proxy that only
// counts the calls open, so the busy phase starts with a batch in the model
// and must end with documents still pending. Sub-benchmarks:
// "one-process" sends questions to the document process (no
// RAGENT_EMBEDDING_QUERY_BASE_URL), "one-process-batch4-cap2" too, with
// document calls of 4 texts and a cap of 2 (one call for documents, one
// for questions), "query-process" to the query process (the default
// settings otherwise).
//
//	go test ./cmd/ragent -run '^$' -bench LocalQueryUnderBulkIngest -benchtime 1x
func BenchmarkLocalQueryUnderBulkIngest(b *testing.B) {
	modes := []struct {
		name       string
		shared     bool // questions go to the document process
		batch, cap int  // 0: the defaults
	}{
		{"one-process", true, 0, 0},
		{"one-process-batch4-cap2", true, 4, 2},
		{"query-process", false, 0, 0},
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			target, err := url.Parse(testenv.EmbedderURL(b))
			if err != nil {
				b.Fatal(err)
			}
			var docInFlight atomic.Int64
			rp := httputil.NewSingleHostReverseProxy(target)
			proxy := http.NewServeMux()
			proxy.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
				docInFlight.Add(1)
				defer docInFlight.Add(-1)
				r.URL.Path = strings.TrimPrefix(r.URL.Path, "/v1")
				rp.ServeHTTP(w, r)
			})
			srv := httptest.NewServer(proxy)
			b.Cleanup(srv.Close)
			cfg := localEmbedderConfig(b)
			cfg.Demo = false
			cfg.EmbedBaseURL = srv.URL + "/v1"
			if mode.shared {
				cfg.EmbedQueryBaseURL = target.String()
			}
			if mode.batch > 0 {
				cfg.EmbedBatchSize, cfg.EmbedConcurrency = mode.batch, mode.cap
			}
			in := start(b, cfg)
			c := in.client(b, in.login(b, "admin", "admin-password"))
			kb := benchKB(b, c)
			questions := []string{"how do I get VPN access from home?", "远程办公如何申请 VPN 令牌？", "which token opens the VPN", "VPN 访问需要什么？"}
			search := func(i int) time.Duration { return timedSearch(b, c, kb, questions[i%len(questions)]) }
			const n = 60
			measure := func() []time.Duration {
				out := make([]time.Duration, n)
				for i := range out {
					out[i] = search(i)
				}
				return out
			}
			search(0) // warm up connections and caches
			idle := measure()

			// The bulk ingest: 20 documents of 16 chunks each, ~60 tokens a
			// chunk.
			bulk := uploadBulk(c, kb, 20, 16, " ", "Inventory counts are reconciled weekly against the ledger, and 仓库每周盘点一次库存。\n\n")
			testenv.Eventually(b, 120*time.Second, "a document batch in the model", func() bool { return docInFlight.Load() >= 1 })
			// Only searches that start while a document call is open count:
			// where questions queue behind batches the ingest may end first.
			var busy []time.Duration
			for i := 0; len(busy) < n; i++ {
				if docInFlight.Load() == 0 {
					pending := 0
					for _, id := range bulk {
						if c.document(id).Status != "ready" {
							pending++
						}
					}
					if pending == 0 {
						break
					}
					continue
				}
				busy = append(busy, search(i))
			}
			if len(busy) < 5 {
				b.Fatalf("only %d searches during the bulk ingest; make it larger", len(busy))
			}
			b.ReportMetric(ms(eval.Percentile(idle, 0.5)), "idle-p50-ms")
			b.ReportMetric(ms(eval.Percentile(idle, 0.95)), "idle-p95-ms")
			b.ReportMetric(ms(eval.Percentile(busy, 0.5)), "bulk-p50-ms")
			b.ReportMetric(ms(eval.Percentile(busy, 0.95)), "bulk-p95-ms")
			b.ReportMetric(ms(eval.Percentile(busy, 0.5))/ms(eval.Percentile(idle, 0.5)), "p50-ratio")
			b.ReportMetric(float64(len(busy)), "bulk-searches")
		})
	}
}
