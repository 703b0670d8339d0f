package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Budget is what a model endpoint allows per window, across every instance:
// requests and tokens (input + output). A limiter with a budget grants a
// request only when a permit is free and the budget has room for the
// request's tokens after those of the live requests ahead of it, in the same
// queue and the same round trip (lua/budget.lua). Tokens are reserved at the
// grant and settled when the permit is released (Permit.ReleaseUsed). A
// refusal of the provider (Limiter.Throttled) shrinks the budget for every
// instance; it recovers over the next windows.
type Budget struct {
	Requests int // per Window; 0 = unlimited
	Tokens   int // per Window; 0 = unlimited
	// Window is the budget's period (default one minute). Providers count
	// per minute; tests and benchmarks shorten it.
	Window time.Duration
}

func (b Budget) enabled() bool { return b.Requests > 0 || b.Tokens > 0 }

func (b Budget) window() time.Duration {
	if b.Window <= 0 {
		return time.Minute
	}
	return b.Window
}

// args are the budget's ARGV of the scripts: req_limit, tok_limit, window_ms.
func (b Budget) args() []any {
	return []any{max(b.Requests, 0), max(b.Tokens, 0), b.window().Milliseconds()}
}

// Cost is what one grant spends of a limiter's budget: one request and
// Tokens tokens (the prompt estimated, plus the answer's maximum).
type Cost struct {
	Tokens int
	// Retry is the permit of an earlier try of the same call that the
	// provider refused: the request takes back the place it had in the
	// queue, ahead of everyone who came after it (with a budget or
	// without).
	Retry *Permit
	// OnWait, when set, is told (from the acquiring goroutine) each time
	// the request's place or what it waits for changes; it must not block.
	OnWait func(Wait)
}

// Wait is a waiting request's state.
type Wait struct {
	Position, Queued int
	// Budget is true when a permit is free for the request but the budget
	// is not: it waits for the window to move on.
	Budget bool
}

// AcquireCost is AcquireClass for a request that spends cost of the
// limiter's budget (without a budget it is AcquireClass).
func (l *Limiter) AcquireCost(ctx context.Context, requestID, userID string, c Class, cost Cost) (*Permit, error) {
	c.cost = &cost
	if cost.Retry != nil && cost.Retry.score > 0 {
		// The retried try's own permit is gone already (Throttled released
		// it); a new id keeps its place by score.
		c.place = cost.Retry.score
	}
	return l.AcquireClass(ctx, requestID, userID, c, nil)
}

// budget is the budget's hash, in the limiter's hash tag.
func (k keys) budget() string { return strings.TrimSuffix(k.queue, "queue") + "budget" }

// budgetEnqueueArgs are enqueue.lua's budget key and arguments.
func (l *Limiter) budgetEnqueueArgs(c Class) (string, []any) {
	if !l.cfg.Budget.enabled() {
		return "", nil
	}
	tokens := 0
	if c.cost != nil {
		tokens = max(c.cost.Tokens, 0)
	}
	return l.keys.budget(), append(append([]any{tokens}, l.cfg.Budget.args()...), c.budgetReserve())
}

// budgetReserve is the class's Class.BudgetReserve in thousandths, as the
// scripts take it.
func (c Class) budgetReserve() int {
	return int(math.Round(min(max(c.BudgetReserve, 0), 0.999) * 1000))
}

// reportWait tells the request's OnWait of a changed state.
func (c Class) reportWait(res claimReply, last *Wait) {
	if c.cost == nil || c.cost.OnWait == nil {
		return
	}
	w := Wait{Position: res.position, Queued: res.queued, Budget: res.budgetOnly}
	if w != *last {
		*last = w
		c.cost.OnWait(w)
	}
}

// budgetSkip is how many poll ticks a request waiting only for the budget
// lets pass: the budget refills with time, not with releases.
func (l *Limiter) budgetSkip(wait time.Duration) int64 {
	n := int64(math.Ceil(float64(wait) / float64(l.cfg.PollInterval)))
	return min(max(n, 1), maxPollSkip)
}

// budgetPermit makes a granted permit settle its reservation when it is
// released. p is a redisPermit: its release, replaced here, also gives
// back the local share's count of Redis permits in flight (local.go).
func (l *Limiter) budgetPermit(p *Permit, id string, c Class, res claimReply) *Permit {
	if !l.cfg.Budget.enabled() {
		return p
	}
	reserved := res.reserved
	if reserved < 0 && c.cost != nil {
		reserved = c.cost.Tokens // granted by a call whose reply was lost
	}
	p.used = -1
	p.release = func(ctx context.Context) {
		l.local.redisHeld(-1)
		args := append([]any{id, l.keys.notify}, l.cfg.Budget.args()...)
		n, err := settleScript.Run(ctx, l.rdb, []string{l.keys.permits, l.keys.owners, l.keys.held, l.keys.budget(), l.keys.queue},
			append(args, max(reserved, 0), p.used)...).Int()
		if err != nil {
			l.m.redisErrors.Inc()
			l.cfg.Logger.Warn("ratelimit: release failed; the permit expires with its lease",
				"permit", id, "lease", l.cfg.Lease, "err", err)
			return
		}
		l.m.permitsInUse.Set(float64(n))
	}
	l.bm.granted.Add(float64(max(reserved, 0)))
	return p
}

// ReleaseUsed releases the permit and settles its budget reservation with
// the tokens the call really spent (a negative count keeps the
// reservation). Without a budget it is Release.
func (p *Permit) ReleaseUsed(tokens int) {
	p.usedOnce.Do(func() { p.used = tokens })
	p.Release()
}

// Throttled reports that the provider refused the call p was granted for
// (429), asking to wait retryAfter (0 when it did not say): the budget of
// every instance shrinks, and p is released keeping its reservation (the
// provider counted the refused call). Retry the call with Cost.Retry = p.
func (l *Limiter) Throttled(ctx context.Context, p *Permit, retryAfter time.Duration) {
	if l.cfg.Budget.enabled() {
		l.bm.throttled.Inc()
		args := append(l.cfg.Budget.args(), max(retryAfter.Milliseconds(), 0))
		if err := throttleScript.Run(context.WithoutCancel(ctx), l.rdb, []string{l.keys.budget()}, args...).Err(); err != nil {
			l.m.redisErrors.Inc()
			l.cfg.Logger.Warn("ratelimit: could not shrink the budget", "limiter", l.name, "err", err)
		}
	}
	if p != nil {
		p.Release()
	}
}

// BudgetStats is what the current window has spent of a limiter's budget.
type BudgetStats struct {
	Requests, Tokens int
	// Scale is the share of the configured budget granted now (1 unless
	// the provider refused calls lately).
	Scale float64
}

// BudgetStats reads the budget's state from Redis.
func (l *Limiter) BudgetStats(ctx context.Context) (BudgetStats, error) {
	if !l.cfg.Budget.enabled() {
		return BudgetStats{Scale: 1}, nil
	}
	v, err := budgetStatsScript.Run(ctx, l.rdb, []string{l.keys.budget()}, l.cfg.Budget.args()...).Int64Slice()
	if err != nil {
		return BudgetStats{}, fmt.Errorf("ratelimit: budget stats: %w", err)
	}
	if len(v) != 3 {
		return BudgetStats{}, fmt.Errorf("ratelimit: unexpected budget stats reply %v", v)
	}
	return BudgetStats{Requests: int(max(v[0], 0)), Tokens: int(max(v[1], 0)), Scale: float64(v[2]) / 1000}, nil
}

// budgetMetrics are a budgeted limiter's series (README "Budgets, usage and
// quotas"); the spent budget is read from Redis at each scrape.
type budgetMetrics struct {
	l         *Limiter
	granted   prometheus.Counter
	throttled prometheus.Counter
	waiting   prometheus.Gauge
	inUse     *prometheus.Desc
	limit     *prometheus.Desc
	scale     *prometheus.Desc
}

func newBudgetMetrics(l *Limiter) *budgetMetrics {
	labels := prometheus.Labels{"limiter": l.name}
	return &budgetMetrics{l: l,
		granted: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_budget_reserved_tokens_total", ConstLabels: labels,
			Help: "Tokens reserved by this instance's grants, before settlement."}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_provider_throttled_total", ConstLabels: labels,
			Help: "Calls the provider refused (429 or Retry-After) that this instance absorbed: the budget shrank and the call queued again."}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ratelimit_budget_waiting", ConstLabels: labels,
			Help: "Requests of this instance that have a permit free and wait for the budget."}),
		inUse: prometheus.NewDesc("ratelimit_budget_in_use", "Budget spent in the current window across all instances, by dimension (requests, tokens).",
			[]string{"dimension"}, labels),
		limit: prometheus.NewDesc("ratelimit_budget_limit", "The configured budget per window, by dimension (requests, tokens; 0 = unlimited).",
			[]string{"dimension"}, labels),
		scale: prometheus.NewDesc("ratelimit_budget_scale", "Share of the budget granted now: below 1 after provider refusals, recovering.", nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (m *budgetMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.granted.Describe(ch)
	m.throttled.Describe(ch)
	m.waiting.Describe(ch)
	ch <- m.inUse
	ch <- m.limit
	ch <- m.scale
}

// Collect implements prometheus.Collector.
func (m *budgetMetrics) Collect(ch chan<- prometheus.Metric) {
	m.granted.Collect(ch)
	m.throttled.Collect(ch)
	m.waiting.Collect(ch)
	b := m.l.cfg.Budget
	ch <- prometheus.MustNewConstMetric(m.limit, prometheus.GaugeValue, float64(b.Requests), "requests")
	ch <- prometheus.MustNewConstMetric(m.limit, prometheus.GaugeValue, float64(b.Tokens), "tokens")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := m.l.BudgetStats(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.inUse, prometheus.GaugeValue, float64(st.Requests), "requests")
	ch <- prometheus.MustNewConstMetric(m.inUse, prometheus.GaugeValue, float64(st.Tokens), "tokens")
	ch <- prometheus.MustNewConstMetric(m.scale, prometheus.GaugeValue, st.Scale)
}

// registerBudgetMetrics returns the series of a limiter with a budget,
// registered on its Registerer (shared with an earlier limiter of the same
// name there); nil without a budget.
func registerBudgetMetrics(l *Limiter) *budgetMetrics {
	if !l.cfg.Budget.enabled() {
		return nil
	}
	m := newBudgetMetrics(l)
	if l.cfg.Registerer == nil {
		return m
	}
	if err := l.cfg.Registerer.Register(m); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*budgetMetrics); ok {
				return existing
			}
		}
		l.cfg.Logger.Error("ratelimit: budget metrics not registered", "limiter", l.name, "err", err)
	}
	return m
}

// wait moves this instance's count of requests waiting for the budget when
// a request's state flips (*waiting is the request's last one).
func (m *budgetMetrics) wait(waiting *bool, budgetOnly bool) {
	if m == nil || *waiting == budgetOnly {
		return
	}
	*waiting = budgetOnly
	if budgetOnly {
		m.waiting.Inc()
	} else {
		m.waiting.Dec()
	}
}
