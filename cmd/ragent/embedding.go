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

// Embedding traffic (docs/embeddings.md "Embedding traffic"): every call to the
// embedding provider, from every instance, takes a permit of one fair
// limiter named "embed" with RAGENT_EMBEDDING_CONCURRENCY permits, and
// spends its budget (RAGENT_EMBEDDING_REQUESTS_PER_MINUTE and
// _TOKENS_PER_MINUTE) in the same grant. Document batches queue as the
// "user" documents:<knowledge base>:<uploader>, so the fair queue serves
// knowledge bases (and the uploaders within one) in turn: a big import's
// batches in flight raise its level, and a small upload into another
// knowledge base goes ahead of the import's next batches. Re-embedding
// takes the same lane.

// documentClass puts document batches behind every query embedding in the
// queue and keeps one permit for queries, so a query waits for at most one
// call to end, never behind a queue of batches.
var documentClass = ratelimit.Class{Level: 512, Reserve: 1}

// documentWait bounds how long a document batch waits for a permit: the
// worker holds its MQ message meanwhile (renewed), and a bulk ingest can
// queue many batches.
const documentWait = 10 * time.Minute

// embedGate is llm.Gate on the cluster-wide limiter and a cluster-wide
// pause that a provider's Retry-After sets for document batches.
type embedGate struct {
	limiter   *ratelimit.Limiter
	pause     *ratelimit.Pause
	queryWait time.Duration
	log       *slog.Logger
	budgeted  bool // the embedding endpoint has a budget: refused calls keep their place
}

// newEmbedGate returns the gate and the limiter's notification runner.
func newEmbedGate(rdb redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*embedGate, func(context.Context) error) {
	l := ratelimit.New(rdb, cfg.RedisPrefix, "embed", ratelimit.Config{
		MaxConcurrent: cfg.EmbedConcurrency, MaxWait: documentWait, Lease: time.Minute,
		Budget: ratelimit.Budget{Requests: cfg.EmbedRequestsPerMinute, Tokens: cfg.EmbedTokensPerMinute, Window: cfg.BudgetWindow},
		// A Redis outage should not stop embedding: each instance then
		// keeps to the cap on its own.
		OnRedisError: ratelimit.PolicyLocal, Logger: log, Registerer: reg,
	})
	return &embedGate{limiter: l, pause: ratelimit.NewPause(rdb, cfg.RedisPrefix, "embed"), queryWait: cfg.EmbedQueryWait, log: log,
		budgeted: cfg.EmbedRequestsPerMinute > 0 || cfg.EmbedTokensPerMinute > 0}, l.Run
}

var errQueryWait = errors.New("no embedding slot for the query within RAGENT_EMBEDDING_QUERY_WAIT")

// Admit implements llm.Gate. A query waits up to queryWait in the
// queries' lane (fair between users); a document batch first waits out a
// pause, then queues behind the queries, and waits again if a pause began
// while it queued.
func (g *embedGate) Admit(ctx context.Context, kind service.EmbedKind, tokens int) (func(), error) {
	p, err := g.admit(ctx, kind, tokens, nil)
	if err != nil {
		return nil, err
	}
	return p.Release, nil
}

// admit is Admit's permit; retry, when not nil, is the permit of an
// earlier try of the call that the provider refused, whose place in the
// queue the call takes back (with a budget: Budget).
func (g *embedGate) admit(ctx context.Context, kind service.EmbedKind, tokens int, retry *ratelimit.Permit) (*ratelimit.Permit, error) {
	id, err := requestID()
	if err != nil {
		return nil, err
	}
	if kind == service.EmbedQuery {
		user := "query"
		if p, ok := service.PrincipalFrom(ctx); ok {
			user = "query:" + p.UserID.String()
		}
		qctx, cancel := context.WithTimeoutCause(ctx, g.queryWait, errQueryWait)
		defer cancel()
		permit, err := g.limiter.AcquireCost(qctx, id, user, ratelimit.Class{}, ratelimit.Cost{Tokens: tokens, Retry: retry})
		if err != nil {
			if ctx.Err() == nil && (errors.Is(err, ratelimit.ErrTimeout) || context.Cause(qctx) == errQueryWait) {
				return nil, fmt.Errorf("%w: %v", service.ErrBusy, errQueryWait)
			}
			return nil, err
		}
		return permit, nil
	}
	// A refused call's retry queues at once at its place: the refusal's
	// budget hold, set with the pause and as long, keeps it (and every
	// other grant) back meanwhile. Waiting out the pause first, outside the
	// queue, would let the batches behind it go first when the pause ends.
	refused := retry != nil
	for {
		if refused {
			// no pause to wait out
		} else if err := g.pause.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			g.log.WarnContext(ctx, "embedding pause unreadable; going ahead", "err", err)
		}
		permit, err := g.limiter.AcquireCost(ctx, id, documentLane(ctx), documentClass, ratelimit.Cost{Tokens: tokens, Retry: retry})
		if err != nil {
			if errors.Is(err, ratelimit.ErrTimeout) {
				return nil, fmt.Errorf("%w: no embedding slot for a document batch within %s", service.ErrUnavailable, documentWait)
			}
			return nil, err
		}
		if refused {
			return permit, nil
		}
		if left, err := g.pause.Left(ctx); err != nil || left <= 0 {
			return permit, nil
		}
		// A pause began while the batch queued: give the permit back (no
		// call went out) and wait again, keeping the place it was granted at.
		permit.ReleaseUsed(0)
		retry = permit
	}
}

// Budget implements llm.RetryGate: with the embedding budget set, a
// refused call keeps its place — a query's among the queries, within
// RAGENT_EMBEDDING_QUERY_WAIT of its first try, a document batch's among
// the batches (behind every query), within documentWait.
func (g *embedGate) Budget(kind service.EmbedKind) (llm.Budget, time.Duration) {
	if !g.budgeted {
		return nil, 0
	}
	if kind == service.EmbedQuery {
		return embedBudget{g: g, kind: kind}, g.queryWait
	}
	return embedBudget{g: g, kind: kind}, documentWait
}

// embedBudget is llm.Budget on the gate for calls of one kind.
type embedBudget struct {
	g    *embedGate
	kind service.EmbedKind
}

func (b embedBudget) Admit(ctx context.Context, tokens int, retry llm.BudgetGrant) (llm.BudgetGrant, error) {
	var prev *ratelimit.Permit
	if r, ok := retry.(*embedGrant); ok {
		prev = r.p
	}
	p, err := b.g.admit(ctx, b.kind, tokens, prev)
	if err != nil {
		return nil, err
	}
	return &embedGrant{b: b, p: p, ctx: ctx}, nil
}

// embedGrant is one admitted embedding call.
type embedGrant struct {
	b   embedBudget
	p   *ratelimit.Permit
	ctx context.Context
}

func (g *embedGrant) Done(tokens int) { g.p.ReleaseUsed(tokens) }

// Throttled shrinks the budget and pauses document batches, as the
// gate's Throttled, and gives the permit back.
func (g *embedGrant) Throttled(d time.Duration) {
	g.b.g.throttled(g.ctx, g.p, d)
}

// documentLane is the queue "user" of a document batch: its knowledge base
// and uploader, so imports share the lane fairly.
func documentLane(ctx context.Context) string {
	s := service.UsageScopeFrom(ctx)
	return "documents:" + s.KnowledgeBaseID.String() + ":" + s.UserID.String()
}

// Throttled implements llm.Gate: whatever call was told to wait, document
// batches on every instance wait that long, and the embedding budget
// shrinks for every instance.
func (g *embedGate) Throttled(ctx context.Context, kind service.EmbedKind, d time.Duration) {
	g.throttled(ctx, nil, d)
}

// throttled shrinks the budget and pauses document batches for d; p, when
// not nil, is the refused call's permit, given back.
func (g *embedGate) throttled(ctx context.Context, p *ratelimit.Permit, d time.Duration) {
	g.limiter.Throttled(ctx, p, d)
	if err := g.pause.Extend(context.WithoutCancel(ctx), d); err != nil {
		g.log.WarnContext(ctx, "could not pause document embedding", "err", err)
		return
	}
	g.log.WarnContext(ctx, "embedding provider asked to wait; document embedding paused on every instance", "retry_after", d.String())
}

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
