// Package ratelimit bounds how much work runs at once across every ragent
// instance, with Redis as the shared state.
//
// A Limiter is the fair chat limiter of DESIGN §7: at most MaxConcurrent
// permits exist at once; requests beyond that wait in one queue shared by
// all instances and are rejected after MaxWait. The queue is fair between
// users: a request's place is set by its level, the number of requests its
// user already had in flight (holding a permit or waiting) when it arrived,
// then by arrival. So a user's requests beyond their first yield to other
// users' waiting requests with fewer in flight, requests of equal level are
// served first come first served across instances, and a user alone still
// gets every free permit (the level orders waiters; it caps no one). The
// rule and its bookkeeping are described in lua/lib.lua. Permits are
// leases (expiry from Redis TIME) renewed while held, so a crashed instance's
// slots come back within one lease, and its queued requests stop blocking the
// line once their entry markers expire. Every state change is one Lua script,
// so an uncontended grant costs one round trip. Waiters wake on a Pub/Sub
// notification when a permit is released and poll as a fallback.
//
// Work of several classes may share one Limiter (AcquireClass): a class's
// level is added to its requests' fairness levels, so a lower class goes
// first, and a class may leave permits in reserve for lower ones (embedding
// queries ahead of document batches).
//
// A Semaphore is the same lease mechanism without the queue (uploads). A
// Pause is a "hold off until" shared by every instance (a provider's
// Retry-After).
//
// The package is a mechanism: it knows Redis and Prometheus, not HTTP or
// ragent's domain. Callers translate its errors (ErrTimeout, ErrQueueFull,
// ErrUnavailable) at their own edge.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The errors Acquire returns besides the caller's own context error. They are
// distinct so callers can answer each differently (wait longer, slow down,
// report an outage).
var (
	// ErrTimeout means no permit became free within the maximum wait.
	ErrTimeout = errors.New("ratelimit: no permit within the maximum wait")
	// ErrQueueFull means the queue (or the user's share of it) is full;
	// the request was rejected without waiting.
	ErrQueueFull = errors.New("ratelimit: queue full")
	// ErrUnavailable means Redis failed and the policy is PolicyReject.
	ErrUnavailable = errors.New("ratelimit: redis unavailable")
)

// Limiter is the fair distributed limiter. Create it with New and run its
// notification subscription with Run; without Run waiters still make
// progress by polling.
type Limiter struct {
	name  string
	rdb   redis.UniversalClient
	cfg   Config
	keys  keys
	m     *metrics
	n     *notifier
	local *localSemaphore // the PolicyLocal fallback
	fence *fence
	bm    *budgetMetrics // Config.Budget's series (budget.go)

	// beatMu serializes the presence beats (awaitSeen's first one and
	// the heartbeat's).
	beatMu sync.Mutex

	// downUntil (unix ns) skips Redis for a moment after it failed, so
	// during an outage each Acquire does not first wait for the client's
	// dial retries.
	downUntil atomic.Int64
}

// New returns a limiter named name (the chat limiter is "chat") whose keys
// start with prefix (empty means "ragent:").
func New(rdb redis.UniversalClient, prefix, name string, cfg Config) *Limiter {
	cfg = cfg.withDefaults(defaultMaxWait, defaultLease)
	k := newKeys(prefix, name)
	m, n := cfg.setup(rdb, k, name)
	l := &Limiter{name: name, rdb: rdb, cfg: cfg, keys: k, m: m, n: n,
		local: newLocalSemaphore(cfg.MaxConcurrent, cfg.Lease), fence: newFence(k, cfg.Lease)}
	l.bm = registerBudgetMetrics(l) // budget.go
	return l
}

// Run holds the notification subscription until ctx ends; with PolicyLocal
// it also keeps this instance counted among the live ones, which sets its
// share of the permits while Redis is away. Held permits stay valid after
// it returns, until released.
func (l *Limiter) Run(ctx context.Context) error {
	if l.cfg.OnRedisError == PolicyLocal {
		beatCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); l.heartbeat(beatCtx) }()
		defer func() { stop(); <-done }()
	}
	return l.n.run(ctx)
}

// Acquire waits for a permit for request requestID of user userID. The
// request's place in the queue follows the fairness rule (package doc): the
// user's permits held and requests queued at this moment set its level.
// While the request waits, onPosition (if not nil) is called from Acquire's
// goroutine each time its 1-based place in the queue changes (it can grow
// when another user's request of a lower level arrives), with the current
// queue length; it must not block.
//
// It returns ErrQueueFull at once when the queue or the user's share is full,
// ErrTimeout after MaxWait, ctx's error when ctx ends first, and (with
// PolicyReject) ErrUnavailable when Redis fails. In every failure case the
// request has left the queue when Acquire returns.
func (l *Limiter) Acquire(ctx context.Context, requestID, userID string, onPosition func(position, queued int)) (*Permit, error) {
	return l.AcquireClass(ctx, requestID, userID, Class{}, onPosition)
}

// Class sets a request's priority among the classes of work sharing one
// limiter (embedding queries and document batches). The zero Class is
// Acquire's.
type Class struct {
	// Level is added to the request's fairness level: a request waits
	// behind every request whose class level is lower, whatever its user
	// (levels are capped at 1023, so a level of 512 puts a class behind
	// every request of level 0 from users with fewer than 512 in flight).
	Level int
	// Reserve permits are kept for lower classes: a request of this class
	// is granted only while more than Reserve permits are free (at least one
	// permit is always left it).
	Reserve int
	// BudgetReserve is the share (0..1) of the limiter's budget, requests
	// and tokens per window, kept for classes without one while one of
	// their requests was granted within the last window: a request of this
	// class fits only within the rest (lua/budget.lua). Without a budget
	// it does nothing.
	BudgetReserve float64

	// cost and place are AcquireCost's (budget.go).
	cost  *Cost
	place float64
}

// AcquireClass is Acquire for a request of class c.
func (l *Limiter) AcquireClass(ctx context.Context, requestID, userID string, c Class, onPosition func(position, queued int)) (*Permit, error) {
	start := l.cfg.Now()
	waitCtx, cancel := context.WithTimeout(ctx, l.cfg.MaxWait)
	defer cancel()

	var p *Permit
	var err error
	if l.cfg.Now().UnixNano() < l.downUntil.Load() {
		err = &redisError{errors.New("redis failed less than a second ago")}
	} else if p, err = l.acquireRedis(ctx, waitCtx, requestID, userID, c, onPosition); err != nil {
		var rerr *redisError
		if errors.As(err, &rerr) {
			l.downUntil.Store(l.cfg.Now().Add(redisRetryAfter).UnixNano())
		}
	}
	var rerr *redisError
	switch {
	case err == nil:
		l.m.waitSeconds.Observe(l.cfg.Now().Sub(start).Seconds())
		return p, nil
	case !errors.As(err, &rerr):
		return nil, err
	case l.cfg.OnRedisError == PolicyLocal:
		l.local.failed()
		l.m.fallbacks.Inc()
		l.cfg.Logger.Warn("ratelimit: Redis failed, using the local semaphore",
			"limiter", l.name, "max", l.cfg.MaxConcurrent, "err", rerr.err)
		p, err := l.acquireLocal(ctx, waitCtx, requestID, userID)
		if err == nil {
			l.m.waitSeconds.Observe(l.cfg.Now().Sub(start).Seconds())
		}
		return p, err
	default:
		l.m.rejections.WithLabelValues(reasonUnavailable).Inc()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, rerr.err)
	}
}

// answered records that a script reached Redis: the local policy's outage
// bound is lifted, and the next Acquire asks Redis at once instead of
// going on with the local semaphore for the rest of the second after the
// last failure (downUntil), which just after an outage would grant local
// permits beside those Redis grants again.
func (l *Limiter) answered() {
	l.downUntil.Store(0)
	l.local.answered()
}

// redisError marks a failed Redis call, as opposed to the caller's context
// ending, so Acquire can apply the policy.
type redisError struct{ err error }

func (e *redisError) Error() string { return e.err.Error() }
func (e *redisError) Unwrap() error { return e.err }

// RetryAfter estimates when a refused request may find room: when the
// oldest waiting request will have left the queue, served or refused at the
// end of its MaxWait (at least a second; a second when nobody waits or
// Redis does not answer).
func (l *Limiter) RetryAfter(ctx context.Context) time.Duration {
	st, err := l.Stats(ctx)
	if err != nil || st.QueueLength == 0 {
		return time.Second
	}
	return min(max(l.cfg.MaxWait-st.OldestWait, time.Second), l.cfg.MaxWait)
}

// Stats is a snapshot of a limiter's shared state, for the admin endpoint.
type Stats struct {
	PermitsInUse int
	QueueLength  int
	// OldestWait is how long the head of the queue has waited (0 when empty).
	OldestWait time.Duration
}

// Stats reads the limiter's current state from Redis.
func (l *Limiter) Stats(ctx context.Context) (Stats, error) {
	return readStats(ctx, l.rdb, l.keys)
}

func readStats(ctx context.Context, rdb redis.UniversalClient, k keys) (Stats, error) {
	v, err := statsScript.Run(ctx, rdb, []string{k.permits, k.queue, k.entry}, headWindow).Int64Slice()
	if err != nil {
		return Stats{}, fmt.Errorf("ratelimit: stats: %w", err)
	}
	if len(v) != 3 {
		return Stats{}, fmt.Errorf("ratelimit: unexpected stats reply %v", v)
	}
	s := Stats{PermitsInUse: int(v[0]), QueueLength: int(v[1])}
	if v[2] > 0 {
		s.OldestWait = time.Duration(v[2]) * time.Millisecond
	}
	return s, nil
}
