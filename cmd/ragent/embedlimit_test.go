package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/internal/testenv"
)

// embedConfig points the embedder at fake with a cap of concurrency calls.
func embedConfig(t testing.TB, fake *fakeEmbedServer, concurrency int) Config {
	cfg := testConfig(t)
	cfg.EmbedProvider, cfg.EmbedModel, cfg.EmbedBaseURL, cfg.EmbedDim = "openai", "fake", fake.URL(), fake.dim
	cfg.EmbedConcurrency = concurrency
	cfg.MQVisibilityTimeout = 2 * time.Second
	return cfg
}

// testRedis returns a client on cfg's Redis, whatever its topology.
func testRedis(t testing.TB, cfg Config) redis.UniversalClient {
	rdb, err := redisconn.New(cfg.redisOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// embedInstances starts instances "a" and "b" of cfg and returns an admin
// client of each.
func embedInstances(t *testing.T, cfg Config) (*client, *client) {
	t.Helper()
	var out []*client
	for _, name := range []string{"a", "b"} {
		c := cfg
		c.InstanceID = name
		in := start(t, c)
		out = append(out, in.adminClient(t))
	}
	return out[0], out[1]
}

// TestEmbeddingLimitAcrossInstances ingests in bulk through two instances
// against a model server that counts the calls open at once: together they
// never exceed RAGENT_EMBEDDING_CONCURRENCY, document batches leave one
// slot to queries, and a search's query embedding is served while document
// batches fill their share and more wait in the queue.
func TestEmbeddingLimitAcrossInstances(t *testing.T) {
	const limit, docs = 3, 16
	fake := newFakeEmbedServer(t, 32)
	cfg := embedConfig(t, fake, limit)
	ca, cb := embedInstances(t, cfg)
	kb := ca.createKB("bulk")

	fake.holdAfter(0)
	ids := make([]string, docs)
	for i := range docs {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		ids[i] = c.uploadAccepted(kb, fmt.Sprintf("bulk%d.txt", i), fmt.Appendf(nil, "Ledger %d lists shipment%d of copper wire.", i, i)).ID
	}
	// The document share (limit - 1) is full and more batches queue.
	testenv.Eventually(t, 60*time.Second, "document calls fill their share", func() bool { return fake.docInFlight.Load() == limit-1 })
	rdb := testRedis(t, cfg)
	testenv.Eventually(t, 60*time.Second, "document batches queue", func() bool {
		return rdb.ZCard(context.Background(), cfg.RedisPrefix+"{limiter:embed}:queue").Val() > 0
	})

	r := cb.do("POST", "/api/v1/search", map[string]any{"query": "query shipment3 copper", "knowledgeBaseIds": []string{kb}, "mode": "hybrid"})
	if r.Status != http.StatusOK {
		t.Fatalf("search during the bulk ingest: %d %s", r.Status, r.Body)
	}
	if fake.queryCalls.Load() != 1 || fake.docInFlight.Load() != limit-1 {
		t.Fatalf("query calls %d with %d document calls held; want the query served while the documents wait",
			fake.queryCalls.Load(), fake.docInFlight.Load())
	}

	fake.release()
	for _, id := range ids {
		ca.waitReady(id)
	}
	if m := fake.maxInFlight.Load(); m > limit {
		t.Fatalf("%d embedding calls at once, cap %d", m, limit)
	}
	if m := fake.maxDocInFlight.Load(); m != limit-1 {
		t.Fatalf("%d document calls at once, want their share %d", m, limit-1)
	}
	if !hasDocument(ca.search(kb, "query shipment3 copper", "vector"), ids[3]) {
		t.Fatal("vector search does not find the document")
	}
}

// TestEmbeddingRetryAfterPausesDocuments: the model server answers a
// document batch 429 with Retry-After; document embedding then pauses on
// every instance (no further document call reaches the server) while a
// query is still served, and resumes when the pause ends.
func TestEmbeddingRetryAfterPausesDocuments(t *testing.T) {
	fake := newFakeEmbedServer(t, 32)
	cfg := embedConfig(t, fake, 2)
	ca, cb := embedInstances(t, cfg)
	kb := ca.createKB("throttled")

	retryAfter := "60"
	fake.throttle.Store(&retryAfter)
	var ids []string
	for i := range 4 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		ids = append(ids, c.uploadAccepted(kb, fmt.Sprintf("t%d.txt", i), fmt.Appendf(nil, "Invoice %d for order%d of steel.", i, i)).ID)
	}
	rdb := testRedis(t, cfg)
	pause := cfg.RedisPrefix + "{limiter:embed}:pause"
	testenv.Eventually(t, 60*time.Second, "the pause is set", func() bool { return rdb.PTTL(context.Background(), pause).Val() > 30*time.Second })
	// Every document is being ingested (its worker waits out the pause).
	testenv.Eventually(t, 60*time.Second, "all documents running", func() bool {
		for _, id := range ids {
			if st := ca.document(id).Status; st != "running" {
				return false
			}
		}
		return true
	})
	if r := cb.do("POST", "/api/v1/search", map[string]any{"query": "query order2 steel", "knowledgeBaseIds": []string{kb}}); r.Status != http.StatusOK {
		t.Fatalf("search during the pause: %d %s", r.Status, r.Body)
	}
	if q, d := fake.queryCalls.Load(), fake.docCalls.Load(); q != 1 || d != 1 {
		t.Fatalf("during the pause: %d query calls (want 1), %d document calls (want only the throttled one)", q, d)
	}

	// The pause ends (an operator may delete the key too): ingestion resumes.
	if err := rdb.Del(context.Background(), pause).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		ca.waitReady(id)
	}
}
