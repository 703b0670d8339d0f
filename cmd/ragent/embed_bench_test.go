package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/ratelimit"
)

// BenchmarkQueryEmbeddingUnderBulkIngest measures /search (hybrid: one
// query embedding, the keyword and the vector query) on an idle instance
// and while a bulk ingest keeps the embedding cap full, against an
// in-test model server whose call costs 2 ms + 5 ms per text (a document
// batch of 32 takes 162 ms, a query 7 ms). Sub-benchmarks: "lane" is the
// shipped policy (document batches behind queries, one slot kept for
// queries); "fair-only" puts document batches in the queries' class, so
// only the chat queue's fairness levels order them (the batches' user has
// many in flight); "lane-serial" is the shipped policy against a model
// server that computes one call at a time (a one-worker local server),
// where a query waits for the batches the server is computing, one per
// document permit: "lane-serial-cap2" is that server with a cap of 2 (one
// permit for documents, one for queries).
//
//	go test ./cmd/ragent -run '^$' -bench QueryEmbeddingUnderBulkIngest -benchtime 1x
func BenchmarkQueryEmbeddingUnderBulkIngest(b *testing.B) {
	modes := []struct {
		name   string
		class  ratelimit.Class
		serial bool
		cap    int
	}{
		{"lane", documentClass, false, 4},
		{"fair-only", ratelimit.Class{}, false, 4},
		{"lane-serial", documentClass, true, 4},
		{"lane-serial-cap2", documentClass, true, 2},
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			saved := documentClass
			documentClass = mode.class
			defer func() { documentClass = saved }()
			fake := newFakeEmbedServer(b, 64)
			fake.cost = func(n int) time.Duration { return 2*time.Millisecond + time.Duration(n)*5*time.Millisecond }
			fake.serial = mode.serial
			cfg := embedConfig(b, fake, mode.cap)
			in := start(b, cfg)
			c := in.client(b, in.login(b, "admin", "admin-password"))
			kb := benchKB(b, c)
			search := func() time.Duration { return timedSearch(b, c, kb, "query vpn token3 access") }
			const n = 100
			measure := func() []time.Duration {
				out := make([]time.Duration, n)
				for i := range out {
					out[i] = search()
				}
				slices.Sort(out)
				return out
			}
			search() // warm up connections and caches
			idle := measure()

			// The bulk ingest: 60 documents of about 64 chunks each.
			bulk := uploadBulk(c, kb, 60, 64, "\n\n", strings.Repeat("Inventory counts are reconciled weekly against the ledger. ", 6)+"\n\n")
			testenv.Eventually(b, 60*time.Second, "document batches in flight", func() bool { return fake.docInFlight.Load() >= 1 })
			docsBefore := fake.docCalls.Load()
			busy := measure()
			docsDuring := fake.docCalls.Load() - docsBefore
			pending := 0
			for _, id := range bulk {
				if c.document(id).Status != "ready" {
					pending++
				}
			}
			if pending == 0 {
				b.Fatal("the bulk ingest ended before the measurement did; make it larger")
			}
			p := func(d []time.Duration, q float64) float64 {
				return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(p(idle, 0.5), "idle-p50-ms")
			b.ReportMetric(p(idle, 0.95), "idle-p95-ms")
			b.ReportMetric(p(busy, 0.5), "bulk-p50-ms")
			b.ReportMetric(p(busy, 0.95), "bulk-p95-ms")
			b.ReportMetric(p(busy, 0.5)/p(idle, 0.5), "p50-ratio")
			b.ReportMetric(float64(docsDuring), "doc-calls-during")
			b.ReportMetric(float64(fake.maxInFlight.Load()), "max-calls")
		})
	}
}

// benchKB creates the embedding benchmarks' knowledge base (64-token
// chunks) with five one-line documents ingested, and returns its id.
func benchKB(b *testing.B, c *client) string {
	b.Helper()
	r := c.do("POST", "/api/v1/knowledge-bases", map[string]any{"name": "bench", "chunkSize": 64, "chunkOverlap": 0})
	if r.Status != http.StatusCreated {
		b.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var kb struct{ ID string }
	r.json(b, &kb)
	for i := range 5 {
		c.waitReady(c.uploadAccepted(kb.ID, fmt.Sprintf("small%d.txt", i), fmt.Appendf(nil, "Policy %d: VPN access needs token%d.", i, i)).ID)
	}
	return kb.ID
}

// uploadBulk uploads docs warehouse manuals of sections sections each (a
// numbered sentence, end, then filler) for ingestion and returns their ids.
func uploadBulk(c *client, kb string, docs, sections int, end, filler string) []string {
	var ids []string
	for i := range docs {
		var sb strings.Builder
		for p := range sections {
			fmt.Fprintf(&sb, "Section %d.%d of the warehouse manual explains pallet%d rotation, the forklift%d checks and the dock%d schedule for shift %d.%s",
				i, p, p, i, p, p%3, end)
			sb.WriteString(filler)
		}
		ids = append(ids, c.uploadAccepted(kb, fmt.Sprintf("bulk%d.txt", i), []byte(sb.String())).ID)
	}
	return ids
}

// timedSearch runs one hybrid /search of query in kb and returns how long
// it took.
func timedSearch(b *testing.B, c *client, kb, query string) time.Duration {
	b.Helper()
	start := time.Now()
	r := c.do("POST", "/api/v1/search", map[string]any{"query": query, "knowledgeBaseIds": []string{kb}, "mode": "hybrid"})
	if r.Status != http.StatusOK {
		b.Fatalf("search: %d %s", r.Status, r.Body)
	}
	return time.Since(start)
}
