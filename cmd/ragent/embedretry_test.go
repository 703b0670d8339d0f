package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/service"
)

// TestEmbeddingRefusalKeepsItsPlace: with the embedding budget set, a
// document batch the provider refuses (429) goes back to the place it had
// in the queue, ahead of the batches that queued behind it meanwhile, and
// is answered, not failed. Two gates on one Redis stand for two instances,
// one embedding slot between them; the provider holds batch "a" until "b"
// (the other instance's) and "c" queue, then refuses it with a reset of
// 100 ms, and refuses its next two tries too. The calls then reach the
// provider in the order a, b, c, and none fails though the embedder may
// retry only once. Before refused calls kept their place, "a" queued again
// behind "c" (its user's level had grown with b and c): b, c, a; and its
// refusals were retries, so the third failed the call.
func TestEmbeddingRefusalKeepsItsPlace(t *testing.T) {
	var (
		mu      sync.Mutex
		order   []string
		refused int
	)
	arrived, answer := make(chan string, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := oneInput(w, r)
		if !ok {
			return
		}
		mu.Lock()
		refuse := in == "a" && refused < 3
		if refuse {
			refused++
		} else {
			order = append(order, in)
		}
		first := refused == 1 && refuse
		mu.Unlock()
		arrived <- in
		if first {
			<-answer
		}
		if refuse {
			w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
			w.Header().Set("X-Ratelimit-Reset-Requests", "100ms")
			http.Error(w, `{"error":{"message":"rate limit"}}`, http.StatusTooManyRequests)
			return
		}
		answerOne(w)
	}))
	t.Cleanup(srv.Close)

	cfg := embedGateConfig(t)
	cfg.EmbedConcurrency, cfg.EmbedRequestsPerMinute = 1, 1000
	rdb := testRedis(t, cfg)
	embedder := func() service.Embedder { return gatedEmbedder(t, rdb, cfg, srv.URL, 1) }
	errs := queueABC(t, rdb, cfg, embedder(), embedder(), arrived)
	close(answer) // a is refused
	waitEmbeds(t, errs, 3)
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[0] != "a" || order[1] != "b" || order[2] != "c" {
		t.Fatalf("the provider answered %v after refusing a, want [a b c]: the refused call keeps its place", order)
	}
}

// embedGateConfig is the configuration of a test of the embedding gate
// alone: only Redis is needed, no database.
func embedGateConfig(t *testing.T) Config {
	t.Helper()
	ro := testenv.RedisOptions(t)
	env := map[string]string{"RAGENT_REDIS_URL": ro.URL, "RAGENT_REDIS_SENTINEL_ADDRS": strings.Join(ro.SentinelAddrs, ","),
		"RAGENT_REDIS_SENTINEL_MASTER": ro.SentinelMaster, "RAGENT_REDIS_CLUSTER_ADDRS": strings.Join(ro.ClusterAddrs, ","),
		"RAGENT_REDIS_PREFIX": testenv.Prefix(t)}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// gatedEmbedder is an instance's embedder of url behind its own gate on
// rdb, retrying failed calls up to retries times.
func gatedEmbedder(t *testing.T, rdb redis.UniversalClient, cfg Config, url string, retries int) service.Embedder {
	t.Helper()
	gate, run := newEmbedGate(rdb, cfg, nil, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go run(ctx)
	e, err := llm.NewEmbedder(llm.Config{EmbeddingProvider: "openai", EmbeddingModel: "fake", EmbeddingBaseURL: url,
		EmbeddingDim: 4, EmbeddingGate: gate, MaxRetries: retries, BackoffBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEmbeddingRefusalKeepsItsPlaceWithoutBudget: with no embedding budget,
// a document batch the provider refuses (429) still goes back to the place
// it had in the queue. Two gates on one Redis stand for two instances, one
// slot between them, one lane (one uploader's import): "a" is held at the
// provider while "b" (the other instance's) and "c" queue, then refused;
// "b" takes the slot and is held until a's retry and "c" both queue. The
// next call is a's retry, then c's. Before the change a's retry queued at
// a new place behind c (b, c, a).
func TestEmbeddingRefusalKeepsItsPlaceWithoutBudget(t *testing.T) {
	var (
		mu      sync.Mutex
		order   []string
		refused bool
	)
	arrived, answerA, answerB := make(chan string, 16), make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := oneInput(w, r)
		if !ok {
			return
		}
		mu.Lock()
		refuse := in == "a" && !refused
		refused = refused || refuse
		if !refuse {
			order = append(order, in)
		}
		mu.Unlock()
		arrived <- in
		switch {
		case refuse:
			<-answerA
			http.Error(w, `{"error":{"message":"rate limit"}}`, http.StatusTooManyRequests)
			return
		case in == "b":
			<-answerB
		}
		answerOne(w)
	}))
	t.Cleanup(srv.Close)
	cfg := embedGateConfig(t)
	cfg.EmbedConcurrency = 1
	rdb := testRedis(t, cfg)
	errs := queueABC(t, rdb, cfg, gatedEmbedder(t, rdb, cfg, srv.URL, 2), gatedEmbedder(t, rdb, cfg, srv.URL, 2), arrived)
	close(answerA) // a is refused; b takes the slot
	if got := <-arrived; got != "b" {
		t.Fatalf("call after a's refusal %q, want b", got)
	}
	testenv.Eventually(t, 30*time.Second, "a's retry and c queue", embedQueued(rdb, cfg, 2))
	close(answerB)
	waitEmbeds(t, errs, 3)
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[0] != "b" || order[1] != "a" || order[2] != "c" {
		t.Fatalf("the provider answered %v after refusing a, want [b a c]: the refused call keeps its place", order)
	}
}

// embedQueued reports whether n calls wait in the embedding queue.
func embedQueued(rdb redis.UniversalClient, cfg Config, n int64) func() bool {
	return func() bool {
		return rdb.ZCard(context.Background(), cfg.RedisPrefix+"{limiter:embed}:queue").Val() == n
	}
}

// queueABC embeds document batches "a" through e1, once it reached the
// provider "b" through e2, once b queues "c" through e1, all in one lane
// (one uploader's import into one knowledge base), and returns once c
// queues too; each call's error comes on the channel returned.
func queueABC(t *testing.T, rdb redis.UniversalClient, cfg Config, e1, e2 service.Embedder, arrived <-chan string) <-chan error {
	t.Helper()
	ctx := service.WithUsageScope(context.Background(), service.UsageScope{UserID: 7, KnowledgeBaseID: 9})
	errs := make(chan error, 3)
	embed := func(e service.Embedder, text string) {
		_, err := e.Embed(ctx, service.EmbedDocument, []string{text})
		errs <- err
	}
	go embed(e1, "a")
	if got := <-arrived; got != "a" {
		t.Fatalf("first call %q, want a", got)
	}
	go embed(e2, "b")
	testenv.Eventually(t, 30*time.Second, "b queues", embedQueued(rdb, cfg, 1))
	go embed(e1, "c")
	testenv.Eventually(t, 30*time.Second, "c queues", embedQueued(rdb, cfg, 2))
	return errs
}

// waitEmbeds fails unless n calls on errs end without an error.
func waitEmbeds(t *testing.T, errs <-chan error, n int) {
	t.Helper()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("an embedding call failed: %v", err)
		}
	}
}

// oneInput reads the one text of an embedding request (answering 400
// and false to any other).
func oneInput(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req struct{ Input []string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Input) != 1 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return "", false
	}
	return req.Input[0], true
}

// answerOne answers an embedding request of one text.
func answerOne(w http.ResponseWriter) {
	json.NewEncoder(w).Encode(map[string]any{"data": []any{map[string]any{"index": 0, "embedding": []float32{1, 0, 0, 0}}}})
}
