package llm

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragent-go/ragent/service"
)

// maxCooldown caps a cooldown a Retry-After asks for: an endpoint that
// asks for an hour is tried again sooner, and answers again if it must.
const maxCooldown = 10 * time.Minute

// Cooldowns remembers which endpoints failed recently so that every
// instance skips them for a while. cache.Cooldowns keeps them in Redis;
// without one they stay in the process.
type Cooldowns interface {
	// CoolingFor returns how long endpoint still cools down; 0 when it
	// does not.
	CoolingFor(ctx context.Context, endpoint string) (time.Duration, error)
	// Cool makes endpoint cool down for d, never shortening a longer
	// cooldown another instance set.
	Cool(ctx context.Context, endpoint string, d time.Duration) error
}

// Metrics counts model calls per endpoint.
type Metrics struct {
	calls      *prometheus.CounterVec
	skipped    *prometheus.CounterVec
	firstToken *prometheus.HistogramVec
}

// NewMetrics registers the model-call metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_llm_calls_total",
			Help: "Chat model calls by endpoint and outcome: ok, failover (failed before the first token, next endpoint tried), error, cancelled.",
		}, []string{"endpoint", "outcome"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_llm_cooldown_skips_total",
			Help: "Calls that passed over an endpoint because it was cooling down.",
		}, []string{"endpoint"}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragent_llm_first_token_seconds",
			Help:    "Time from sending a chat request to its first streamed token, by endpoint.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
		}, []string{"endpoint"}),
	}
	reg.MustRegister(m.calls, m.skipped, m.firstToken)
	return m
}

// ChatModels are the chat models a turn uses: Answer streams the answer,
// Fast runs rewrite, intent scoring and titles (nil offline, where those
// steps do without a model).
type ChatModels struct {
	Answer service.ChatModel
	Fast   service.ChatModel
}

// NewChatModels builds the answer and fast models over the primary
// endpoint and cfg.Fallbacks, with failover between them.
func NewChatModels(cfg Config) (ChatModels, error) {
	cfg = cfg.withDefaults()
	if cfg.Provider == ProviderOffline {
		return ChatModels{Answer: &offlineChat{delay: cfg.StreamDelay}}, nil
	}
	eps := append([]Endpoint{cfg.primary()}, cfg.Fallbacks...)
	for _, ep := range eps {
		if err := ep.validate(); err != nil {
			return ChatModels{}, err
		}
	}
	// With fallbacks the next endpoint is the retry: an endpoint that
	// fails is not tried again within the call.
	retries := cfg.MaxRetries
	if len(eps) > 1 {
		retries = 0
	}
	cooldowns := cfg.Cooldowns
	if cooldowns == nil {
		cooldowns = newLocalCooldowns(cfg.Now)
	}
	build := func(fast bool) (service.ChatModel, error) {
		f := &failover{cooldowns: cooldowns, cooldown: cfg.Cooldown, metrics: cfg.Metrics, log: cfg.Logger, now: cfg.Now}
		for _, ep := range eps {
			model := ep.ChatModel
			if fast {
				model = ep.FastModel
				ep.ThinkingModel = "" // fast calls never think
			}
			// An endpoint with a budget retries its 429s in the budget's
			// queue (budget.go), not by backing off on its own.
			var budget Budget
			if cfg.Budgets != nil {
				budget = cfg.Budgets(ep.Name)
			}
			epRetries := retries
			if budget != nil {
				epRetries = 0
			}
			m, err := newEndpointChat(cfg, ep, model, epRetries)
			if err != nil {
				return nil, err
			}
			if budget != nil {
				m = &budgetedChat{model: m, budget: budget, reserve: cfg.AnswerReservation, maxWait: cfg.BudgetWait, now: cfg.Now}
			}
			f.endpoints = append(f.endpoints, endpointModel{name: ep.Name, model: m})
		}
		return f, nil
	}
	answer, err := build(false)
	if err != nil {
		return ChatModels{}, err
	}
	fast, err := build(true)
	if err != nil {
		return ChatModels{}, err
	}
	return ChatModels{Answer: answer, Fast: fast}, nil
}

type endpointModel struct {
	name  string
	model service.ChatModel
}

// failover tries its endpoints in order until one answers. An endpoint
// that fails before its first token with a failure that may pass (429,
// 5xx, a connection error, a timeout) cools down and the next is tried;
// once a token has reached the caller nothing is retried, so a user never
// sees an answer start twice. Endpoints cooling down are tried last, not
// never: a cooldown reorders the list, it refuses nothing.
type failover struct {
	endpoints []endpointModel
	cooldowns Cooldowns
	cooldown  time.Duration
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
}

// Stream implements service.ChatModel. Each endpoint answers with its own
// model, so req.Model is ignored.
func (f *failover) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	req.Model = ""
	var (
		usage   service.Usage
		lastErr error
		emitted bool
	)
	for _, ep := range f.order(ctx) {
		start := f.now()
		usage, lastErr = ep.model.Stream(ctx, req, func(d service.Delta) error {
			if !emitted {
				emitted = true
				if f.metrics != nil {
					f.metrics.firstToken.WithLabelValues(ep.name).Observe(f.now().Sub(start).Seconds())
				}
			}
			return onDelta(d)
		})
		switch {
		case lastErr == nil:
			f.count(ep.name, "ok")
			return usage, nil
		case ctx.Err() != nil:
			f.count(ep.name, "cancelled")
			return usage, lastErr
		case emitted || !failsOver(lastErr):
			f.count(ep.name, "error")
			return usage, lastErr
		}
		f.count(ep.name, "failover")
		d := f.cooldownFor(lastErr)
		f.log.WarnContext(ctx, "model endpoint failed before its first token; cooling it down", "endpoint", ep.name, "cooldown", d.String(), "err", lastErr)
		if err := f.cooldowns.Cool(ctx, ep.name, d); err != nil {
			f.log.WarnContext(ctx, "could not record the endpoint's cooldown", "endpoint", ep.name, "err", err)
		}
	}
	return usage, lastErr
}

// order lists the endpoints not cooling down first, then the cooling ones,
// each group in configured order. A cooldown store that fails counts as
// no cooldown.
func (f *failover) order(ctx context.Context) []endpointModel {
	if len(f.endpoints) == 1 {
		return f.endpoints
	}
	ready := make([]endpointModel, 0, len(f.endpoints))
	var cooling []endpointModel
	for _, ep := range f.endpoints {
		d, err := f.cooldowns.CoolingFor(ctx, ep.name)
		if err != nil {
			f.log.WarnContext(ctx, "could not read the endpoint's cooldown", "endpoint", ep.name, "err", err)
		}
		if d > 0 {
			cooling = append(cooling, ep)
			if f.metrics != nil {
				f.metrics.skipped.WithLabelValues(ep.name).Inc()
			}
			continue
		}
		ready = append(ready, ep)
	}
	return append(ready, cooling...)
}

func (f *failover) count(endpoint, outcome string) {
	if f.metrics != nil {
		f.metrics.calls.WithLabelValues(endpoint, outcome).Inc()
	}
}

// cooldownFor is the endpoint's Retry-After when it sent one, else the
// configured cooldown.
func (f *failover) cooldownFor(err error) time.Duration {
	var se *statusError
	if errors.As(err, &se) && se.retryAfter > 0 {
		return min(se.retryAfter, maxCooldown)
	}
	return f.cooldown
}

// failsOver reports whether another endpoint may succeed where err failed:
// rate limits, server errors, the network and silence; not a refused
// request (400, 401, 404), which another endpoint would refuse alike or
// which needs an operator.
func failsOver(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.retryable()
	}
	var te *timeoutError
	return errors.As(err, &te) || isConnError(err)
}

// localCooldowns keeps cooldowns in this process.
type localCooldowns struct {
	mu    sync.Mutex
	until map[string]time.Time
	now   func() time.Time
}

func newLocalCooldowns(now func() time.Time) *localCooldowns {
	return &localCooldowns{until: map[string]time.Time{}, now: now}
}

func (c *localCooldowns) CoolingFor(_ context.Context, endpoint string) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.until[endpoint].Sub(c.now()), 0), nil
}

func (c *localCooldowns) Cool(_ context.Context, endpoint string, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.now().Add(d); t.After(c.until[endpoint]) {
		c.until[endpoint] = t
	}
	return nil
}
