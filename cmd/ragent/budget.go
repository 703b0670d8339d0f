package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
)

// Budgets (docs/usage-and-quotas.md "Budgets"): every chat endpoint with
// requests or tokens per minute set gets a fair queue of its own, named
// "llm:<endpoint>", in which each model call of a turn (rewrite, intent,
// answer, title) waits for room after the turn holds its chat slot. The
// embedding endpoint's budget is checked in the "embed" limiter's own
// grant (embedding.go), beside its concurrency. The reranker's budget is a
// queue of its own too, "rerank".

// budgetMaxConcurrent leaves a chat endpoint's budget queue without a
// concurrency bound of its own: the chat queue bounds the turns.
const budgetMaxConcurrent = 1 << 20

// chatBudgets builds the budget of every chat endpoint that has one, and
// returns them by endpoint name with the runners of their notifications.
func chatBudgets(rdb redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (func(string) llm.Budget, []func(context.Context) error) {
	budgets := map[string]llm.Budget{}
	var runners []func(context.Context) error
	for i, ep := range llmConfig(cfg, log).Endpoints() {
		rpm, tpm := ep.RequestsPerMinute, ep.TokensPerMinute
		if i == 0 {
			rpm, tpm = cfg.LLMRequestsPerMinute, cfg.LLMTokensPerMinute
		}
		if rpm <= 0 && tpm <= 0 {
			continue
		}
		l := budgetLimiter(rdb, cfg, "llm:"+ep.Name, rpm, tpm, reg, log)
		budgets[ep.Name] = chatBudget(l)
		runners = append(runners, l.Run)
	}
	if len(budgets) == 0 {
		return nil, nil
	}
	return func(name string) llm.Budget {
		if b, ok := budgets[name]; ok {
			return b
		}
		return nil
	}, runners
}

// budgetLimiter is the fair queue of an endpoint's budget of rpm requests
// and tpm tokens per minute, named name.
func budgetLimiter(rdb redis.UniversalClient, cfg Config, name string, rpm, tpm int, reg prometheus.Registerer, log *slog.Logger) *ratelimit.Limiter {
	return ratelimit.New(rdb, cfg.RedisPrefix, name, ratelimit.Config{
		MaxConcurrent: budgetMaxConcurrent, MaxWait: cfg.ChatMaxWait, Lease: cfg.ChatLease,
		PollInterval: cfg.ChatPollInterval,
		Budget:       ratelimit.Budget{Requests: rpm, Tokens: tpm, Window: cfg.BudgetWindow},
		// Redis away: calls go out unbudgeted rather than not at all
		// (the chat queue's own policy has admitted the turn).
		OnRedisError: ratelimit.PolicyLocal, Logger: log, Registerer: reg,
	})
}

// rerankBudget is the reranker's budget (RAGENT_RERANK_REQUESTS_PER_MINUTE
// and _TOKENS_PER_MINUTE), a fair queue named "rerank" like a chat
// endpoint's, with its notification runner; nil without one.
func rerankBudget(rdb redis.UniversalClient, cfg Config, reg prometheus.Registerer, log *slog.Logger) (llm.Budget, func(context.Context) error) {
	if cfg.RerankRequestsPerMinute <= 0 && cfg.RerankTokensPerMinute <= 0 {
		return nil, nil
	}
	l := budgetLimiter(rdb, cfg, "rerank", cfg.RerankRequestsPerMinute, cfg.RerankTokensPerMinute, reg, log)
	return endpointBudget{l: l}, l.Run
}

// endpointBudget is llm.Budget on an endpoint's fair queue: fair between
// the users whose calls wait (inOrder: in the order the calls came), each
// call's wait told to the turn (queue events saying "budget").
type endpointBudget struct {
	l       *ratelimit.Limiter
	inOrder bool
}

// chatBudget is a chat endpoint's budget. Its calls are served in the order
// they came: each belongs to a turn holding a chat slot, which the chat
// queue granted fairly between users already. Ordered by user again, a
// user holding two slots would see each of its calls wait behind every
// other user's call that comes while its other call is in flight (the fair
// queue's level counts both), slot in hand, while turns granted after it
// go by (docs/benchmarks/budgets.md: waits of up to 18 s, and the answers'
// order far from the chat queue's).
func chatBudget(l *ratelimit.Limiter) endpointBudget { return endpointBudget{l: l, inOrder: true} }

func (b endpointBudget) Admit(ctx context.Context, tokens int, retry llm.BudgetGrant) (llm.BudgetGrant, error) {
	var prev *ratelimit.Permit
	id := ""
	if g, ok := retry.(*permitGrant); ok {
		prev, id = g.p, g.id
	}
	if id == "" {
		var err error
		if id, err = requestID(); err != nil {
			return nil, err
		}
	}
	user := "system"
	if b.inOrder {
		// Each call its own user in this queue: every level is 0, so
		// the queue is first come, first served.
		user = id
	} else if p, ok := service.PrincipalFrom(ctx); ok {
		user = p.UserID.String()
	} else if s := service.UsageScopeFrom(ctx); s.UserID != 0 {
		user = s.UserID.String()
	}
	p, err := b.l.AcquireCost(ctx, id, user, ratelimit.Class{}, ratelimit.Cost{Tokens: tokens, Retry: prev, OnWait: reportTo(ctx)})
	if err != nil {
		return nil, budgetError(err)
	}
	return &permitGrant{l: b.l, p: p, id: id, ctx: ctx}, nil
}

// reportTo turns a limiter's waits into ctx's queue report, if any.
func reportTo(ctx context.Context) func(ratelimit.Wait) {
	report := service.QueueReportFrom(ctx)
	if report == nil {
		return nil
	}
	return func(w ratelimit.Wait) {
		what := service.WaitSlot
		if w.Budget {
			what = service.WaitBudget
		}
		report(service.QueueWait{Position: w.Position, Queued: w.Queued, For: what})
	}
}

// budgetError translates a budget queue's refusal.
func budgetError(err error) error {
	switch {
	case errors.Is(err, ratelimit.ErrTimeout), errors.Is(err, ratelimit.ErrQueueFull):
		return fmt.Errorf("%w: no room in the model's budget within the wait", service.ErrBusy)
	case errors.Is(err, ratelimit.ErrUnavailable):
		return fmt.Errorf("%w: %v", service.ErrUnavailable, err)
	}
	return err
}

// permitGrant is one admitted call: its permit settles the reservation.
type permitGrant struct {
	l   *ratelimit.Limiter
	p   *ratelimit.Permit
	id  string
	ctx context.Context
}

func (g *permitGrant) Done(tokens int) { g.p.ReleaseUsed(tokens) }

func (g *permitGrant) Throttled(retryAfter time.Duration) {
	g.l.Throttled(g.ctx, g.p, retryAfter)
}
