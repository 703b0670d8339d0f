package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

// Embedding traffic (docs/embeddings.md "Embedding traffic"): llm.QueueGate
// holds the queue logic; here it is wired to one fair limiter named "embed"
// shared by every instance, with RAGENT_EMBEDDING_CONCURRENCY permits, that
// spends the embedding budget (RAGENT_EMBEDDING_REQUESTS_PER_MINUTE and
// _TOKENS_PER_MINUTE) in the same grant, and to a cluster-wide pause that a
// provider's Retry-After sets for document batches.

// documentClass puts document batches behind every query embedding in the
// queue and keeps one permit for queries, so a query waits for at most one
// call to end, never behind a queue of batches; and it keeps a tenth of
// the budget (requests and tokens per window) for queries while one came
// within the window, so a query never waits for budget the batches took
// (BENCHMARKS.md, the import under an embedding budget).
var documentClass = ratelimit.Class{Level: 512, Reserve: 1, BudgetReserve: 0.1}

// documentWait bounds how long a document batch waits for a permit: the
// worker holds its MQ message meanwhile (renewed), and a bulk ingest can
// queue many batches.
const documentWait = 10 * time.Minute

// newEmbedGate returns the gate and the limiter's notification runner.
func newEmbedGate(rdb redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*llm.QueueGate, func(context.Context) error) {
	l := ratelimit.New(rdb, cfg.RedisPrefix, "embed", ratelimit.Config{
		MaxConcurrent: cfg.EmbedConcurrency, MaxWait: documentWait, Lease: time.Minute,
		Budget: ratelimit.Budget{Requests: cfg.EmbedRequestsPerMinute, Tokens: cfg.EmbedTokensPerMinute, Window: cfg.BudgetWindow},
		// A Redis outage should not stop embedding: each instance then
		// keeps to the cap on its own.
		OnRedisError: ratelimit.PolicyLocal, Logger: log, Registerer: reg,
	})
	q := embedQueue{l: l, budgeted: cfg.EmbedRequestsPerMinute > 0 || cfg.EmbedTokensPerMinute > 0}
	return llm.NewQueueGate(q, ratelimit.NewPause(rdb, cfg.RedisPrefix, "embed"), cfg.EmbedQueryWait, documentWait, log), l.Run
}

// embedQueue is llm.EmbedQueue on the limiter: queries in the zero class,
// document batches in documentClass.
type embedQueue struct {
	l        *ratelimit.Limiter
	budgeted bool
}

func (q embedQueue) Acquire(ctx context.Context, lane string, kind service.EmbedKind, tokens int, retry llm.EmbedGrant) (llm.EmbedGrant, error) {
	id, err := requestID()
	if err != nil {
		return nil, err
	}
	class := ratelimit.Class{}
	if kind != service.EmbedQuery {
		class = documentClass
	}
	prev, _ := retry.(*ratelimit.Permit)
	p, err := q.l.AcquireCost(ctx, id, lane, class, ratelimit.Cost{Tokens: tokens, Retry: prev})
	if err != nil {
		if errors.Is(err, ratelimit.ErrTimeout) {
			return nil, fmt.Errorf("%w: %w", llm.ErrQueueTimeout, err)
		}
		return nil, err
	}
	return p, nil
}

func (q embedQueue) Throttled(ctx context.Context, g llm.EmbedGrant, d time.Duration) {
	p, _ := g.(*ratelimit.Permit)
	q.l.Throttled(ctx, p, d)
}

func (q embedQueue) Budgeted() bool { return q.budgeted }

func requestID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// queryEmbedders embeds queries in each knowledge base's own space: the
// configured one, and the offline embedder's at any dimension (it needs no
// model). Other spaces' models are not run here: their knowledge bases are
// searched by keyword until they are re-embedded.
func queryEmbedders(configured service.Embedder, space service.EmbeddingSpace) retrieve.Embedders {
	key := space.Key()
	return func(sp service.EmbeddingSpace) service.Embedder {
		switch {
		case sp.Key() == key:
			return configured
		case sp.Model == llm.OfflineEmbeddingModel && sp.QueryPrefix == "" && sp.DocumentPrefix == "":
			e, err := llm.NewEmbedder(llm.Config{EmbeddingProvider: llm.ProviderOffline, EmbeddingDim: sp.Dim})
			if err == nil {
				return e
			}
		}
		return nil
	}
}
