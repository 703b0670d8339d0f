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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// Policy says what a Limiter does when Redis fails.
type Policy int

const (
	// PolicyReject fails the acquire with ErrUnavailable.
	PolicyReject Policy = iota
	// PolicyLocal falls back to an in-process semaphore of this
	// instance's share of MaxConcurrent (local.go), so the instances
	// together stay within it; Redis' own bound holds again once it answers.
	PolicyLocal
)

// ParsePolicy parses the RAGENT_CHAT_LIMITER_ON_REDIS_ERROR values "reject"
// and "local".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "reject":
		return PolicyReject, nil
	case "local":
		return PolicyLocal, nil
	}
	return PolicyReject, fmt.Errorf("ratelimit: unknown policy %q (want reject or local)", s)
}

func (p Policy) String() string {
	if p == PolicyLocal {
		return "local"
	}
	return "reject"
}

// Config sets a Limiter's or a Semaphore's bounds and surroundings. Zero
// values take defaults: 10 permits, a 200 ms poll, and a 15 s wait on a 30 s
// lease for a Limiter (DESIGN §7), a 5 s wait on a 300 s lease for a
// Semaphore (uploads); a zero MaxQueue or MaxQueuedPerUser means no cap.
// A disabled limiter is not built: the caller holds none.
type Config struct {
	MaxConcurrent    int
	MaxWait          time.Duration
	Lease            time.Duration
	PollInterval     time.Duration
	MaxQueue         int // Limiter only
	MaxQueuedPerUser int // Limiter only
	// MaxRunningPerUser is the running cap (Limiter only, 0 = none): a
	// user holding that many permits is passed over while another user
	// below it waits (lua/lib.lua); alone, a user still gets every permit.
	MaxRunningPerUser int
	OnRedisError      Policy // Limiter only: a Semaphore always refuses

	// Budget, when set, makes every grant also spend a model endpoint's
	// requests and tokens per window (budget.go, Limiter only).
	Budget Budget

	// NoPubSub turns off the notification subscription, so waiters only
	// poll. Releases still publish, for instances that do subscribe.
	NoPubSub bool
	// Registerer exports the metrics; limiters with the same name on the
	// same registerer share one set of series. Nil keeps them unexported.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil discards
	// Now measures wait times and the pause after a Redis failure (nil is
	// time.Now). Leases never use it: they run on Redis TIME.
	Now func() time.Time
}

const (
	defaultMaxConcurrent = 10
	defaultMaxWait       = 15 * time.Second
	defaultLease         = 30 * time.Second
	defaultPollInterval  = 200 * time.Millisecond

	// markerGrace is how long a queue entry outlives its waiter's deadline,
	// so a live waiter is never mistaken for a zombie near its deadline.
	markerGrace = 5 * time.Second
	// redisRetryAfter is how long Acquire applies the Redis-error policy
	// without asking Redis again after a failure.
	redisRetryAfter = time.Second
	// headWindow is how many queue members one claim inspects ahead of the
	// caller. It bounds a script's work; a longer run of zombies is cleared
	// over several claims.
	headWindow = 128
	// maxPollSkip bounds how many poll ticks a waiter far back in the queue
	// lets pass between claims (2 s at the default 200 ms poll).
	maxPollSkip = 10
)

// withDefaults fills zero fields; maxWait and lease are the defaults of the
// Limiter or the Semaphore.
func (c Config) withDefaults(maxWait, lease time.Duration) Config {
	c.MaxConcurrent = cmp.Or(max(c.MaxConcurrent, 0), defaultMaxConcurrent)
	c.MaxWait = cmp.Or(max(c.MaxWait, 0), maxWait)
	c.Lease = cmp.Or(max(c.Lease, 0), lease)
	c.PollInterval = cmp.Or(max(c.PollInterval, 0), defaultPollInterval)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// setup registers the metrics of the limiter or semaphore named name and
// builds its notifier.
func (c Config) setup(rdb redis.UniversalClient, k keys, name string) (*metrics, *notifier) {
	m, err := registerMetrics(c.Registerer, name)
	if err != nil {
		c.Logger.Error("ratelimit: metrics not registered", "limiter", name, "err", err)
	}
	return m, newNotifier(rdb, k.notify, !c.NoPubSub, c.Logger)
}

// keys are one limiter's Redis keys. They share the hash tag {limiter:name}
// so every script's keys live in one Redis Cluster slot.
type keys struct {
	queue, seq, permits, entry, notify, users, owners, held, deadlines string

	// instances are the live limiter instances (local.go).
	instances string
	// fence is the failover fence's hash (fence.go).
	fence string
}

func newKeys(prefix, name string) keys {
	if prefix == "" {
		prefix = "ragent:"
	}
	base := prefix + "{limiter:" + name + "}:"
	return keys{
		queue:     base + "queue",
		seq:       base + "seq",
		permits:   base + "permits",
		entry:     base + "entry:",
		notify:    base + "notify",
		users:     base + "users",
		owners:    base + "owners",
		held:      base + "held",
		deadlines: base + "deadlines",
		instances: base + "instances",
		fence:     base + "fence",
	}
}

// releaseKeys are release.lua's keys: the permit and its owner bookkeeping.
func (k keys) releaseKeys() []string { return []string{k.permits, k.owners, k.held} }

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

// claimReply is a decoded enqueue.lua or claim.lua reply.
type claimReply struct {
	status   int64 // 1 granted, 0 waiting, -1 lost, -2 queue full, -3 user full
	position int   // waiting: 1-based live place in the queue
	queued   int
	free     int   // waiting: permits free when the script ran
	inUse    int   // granted: permits held
	nowUS    int64 // Redis TIME of the call
	fenced   bool  // waiting: the failover fence holds grants (fence.go)

	// With a budget (budget.go): waiting only for the budget, and how long
	// until it has room; granted: the tokens reserved and the place held.
	budgetOnly bool
	budgetWait time.Duration
	reserved   int
	score      float64
}

const (
	statusGranted   = 1
	statusWaiting   = 0
	statusLost      = -1
	statusQueueFull = -2
	statusUserFull  = -3
)

func parseClaim(v []any) (claimReply, error) {
	n := make([]int64, len(v))
	for i, x := range v {
		k, ok := x.(int64)
		if !ok {
			return claimReply{}, fmt.Errorf("ratelimit: unexpected script reply %v", v)
		}
		n[i] = k
	}
	if len(n) == 0 {
		return claimReply{}, fmt.Errorf("ratelimit: empty script reply")
	}
	r := claimReply{status: n[0]}
	switch {
	case r.status == statusGranted && len(n) >= 4:
		r.inUse, r.queued, r.nowUS = int(n[1]), int(n[2]), n[3]
		r.reserved = -1
		if len(n) >= 6 { // a budget's grant
			r.reserved, r.score = int(n[4]), float64(n[5])
		}
	case r.status == statusWaiting && len(n) >= 5:
		r.position, r.queued, r.nowUS, r.free = int(n[1]), int(n[2]), n[3], int(n[4])
		if len(n) >= 7 { // a budget's wait
			r.budgetOnly, r.budgetWait = n[5] == 1, time.Duration(max(n[6], 0))*time.Millisecond
		}
		r.fenced = len(n) >= 8 && n[7] == 1
	case r.status == statusLost && len(n) >= 4:
		r.queued, r.nowUS = int(n[2]), n[3]
	case r.status == statusQueueFull || r.status == statusUserFull:
	default:
		return claimReply{}, fmt.Errorf("ratelimit: unexpected script reply %v", v)
	}
	return r, nil
}

func (l *Limiter) queueKeys() []string {
	return []string{l.keys.queue, l.keys.permits, l.keys.users, l.keys.owners, l.keys.held, l.keys.deadlines, l.keys.entry}
}

// max is the number of permits a request of class c may see.
func (l *Limiter) max(c Class) int {
	return max(l.cfg.MaxConcurrent-c.Reserve, 1)
}

func (l *Limiter) enqueue(ctx context.Context, id, user string, c Class) (claimReply, error) {
	ttl := markerGrace + l.cfg.MaxWait
	if d, ok := ctx.Deadline(); ok {
		ttl = markerGrace + time.Until(d)
	}
	ks := []string{l.keys.seq, l.keys.queue, l.keys.permits, l.keys.users, l.keys.owners, l.keys.held, l.keys.deadlines, l.keys.entry}
	args := []any{id, user, l.max(c), l.cfg.Lease.Milliseconds(), ttl.Milliseconds(),
		l.cfg.MaxQueue, l.cfg.MaxQueuedPerUser, headWindow, c.Level, max(l.cfg.MaxRunningPerUser, 0)}
	// A budget's key and arguments follow (budget.go), then the fence's
	// go last (fence.go).
	if bk, bargs := l.budgetEnqueueArgs(c); bk != "" {
		ks, args = append(ks, bk), append(args, bargs...)
	}
	v, err := enqueueScript.Run(ctx, l.rdb, l.fence.withKey(ks...), l.fence.withArgs(args...)...).Slice()
	if err != nil {
		return claimReply{}, err
	}
	l.fence.saw()
	l.answered()
	return parseClaim(v)
}

func (l *Limiter) claim(ctx context.Context, id string, c Class) (claimReply, error) {
	ks, args := l.queueKeys(), []any{id, l.max(c), l.cfg.Lease.Milliseconds(), headWindow, max(l.cfg.MaxRunningPerUser, 0)}
	// A budget's key and arguments follow (budget.go), then the fence's
	// go last (fence.go).
	if l.cfg.Budget.enabled() {
		ks, args = append(ks, l.keys.budget()), append(args, l.cfg.Budget.args()...)
	}
	v, err := claimScript.Run(ctx, l.rdb, l.fence.withKey(ks...), l.fence.withArgs(args...)...).Slice()
	if err != nil {
		return claimReply{}, err
	}
	l.fence.saw()
	l.answered()
	return parseClaim(v)
}

// acquireRedis runs the enqueue-then-claim loop. Between claims it sleeps
// until a notification or the poll tick. Each waiter keeps a gap: how many
// permits must still be freed before its turn (its position minus the free
// permits at its last claim). A release notification lowers the gap by one,
// and a waiter only claims on a notification once the gap reaches zero, so
// a release wakes one claim rather than one per waiter. The poll claims
// regardless (every min(gap, maxPollSkip) ticks), which covers lost
// notifications, expired leases and zombies.
func (l *Limiter) acquireRedis(ctx, waitCtx context.Context, id, user string, c Class, onPosition func(int, int)) (*Permit, error) {
	if l.cfg.OnRedisError == PolicyLocal {
		if err := l.awaitSeen(waitCtx); err != nil {
			return nil, l.abandon(ctx, waitCtx, id, err)
		}
	}
	w := l.n.add()
	defer l.n.remove(w)
	poll := time.NewTicker(l.cfg.PollInterval)
	defer poll.Stop()

	res, err := l.enqueue(waitCtx, id, user, c)
	lastPosition, woken := 0, false
	var lastWait Wait // AcquireCost's (budget.go)
	budgetWaiting := false
	defer l.bm.wait(&budgetWaiting, false)
	for {
		if err != nil {
			return nil, l.abandon(ctx, waitCtx, id, err)
		}
		switch res.status {
		case statusGranted:
			if at := w.last.Load(); woken && at > 0 && res.nowUS >= at {
				l.m.handoff.Observe(float64(res.nowUS-at) / 1e6)
			}
			l.m.permitsInUse.Set(float64(res.inUse))
			l.m.queueLength.Set(float64(res.queued))
			return l.budgetPermit(l.redisPermit(id, user), id, c, res), nil
		case statusQueueFull:
			l.m.rejections.WithLabelValues(reasonQueueFull).Inc()
			return nil, ErrQueueFull
		case statusUserFull:
			l.m.rejections.WithLabelValues(reasonUserQueueFull).Inc()
			return nil, fmt.Errorf("%w: too many queued requests for this user", ErrQueueFull)
		case statusLost:
			// The entry vanished (Redis lost its data, or our marker expired):
			// queue again for the wait that is left.
			res, err = l.enqueue(waitCtx, id, user, c)
			continue
		}

		l.m.queueLength.Set(float64(res.queued))
		if res.position != lastPosition {
			lastPosition = res.position
			if onPosition != nil {
				onPosition(res.position, res.queued)
			}
		}
		gap := int64(res.position - res.free)
		woken = false
		// A waiter far back polls less often: it needs gap releases before
		// its turn, so it claims every min(gap, maxPollSkip) ticks. The head
		// still polls every tick, which is what catches expired leases and
		// zombies; a thousand waiters then cost a fraction of the claims.
		skip := min(max(gap, 1), maxPollSkip)
		// A request with a free permit that waits for the budget (budget.go)
		// claims again when the window should have room, or at the next
		// release, whose settlement may give reserved tokens back.
		c.reportWait(res, &lastWait)
		l.bm.wait(&budgetWaiting, res.budgetOnly)
		if res.budgetOnly {
			gap, skip = 1, l.budgetSkip(res.budgetWait)
		}
		if res.fenced {
			// No release is published when the fence's hold ends: poll.
			skip = 1
		}
	wait:
		for {
			select {
			case <-waitCtx.Done():
				return nil, l.abandon(ctx, waitCtx, id, nil)
			case <-poll.C:
				if skip--; skip > 0 {
					continue
				}
				// Notifications seen so far are reflected in this claim.
				w.count.Store(0)
				break wait
			case <-w.wake:
				if gap -= w.count.Swap(0); gap <= 0 {
					woken = true
					break wait
				}
			}
		}
		res, err = l.claim(waitCtx, id, c)
	}
}

// abandon takes request id out of the queue (and gives back a permit granted
// by a reply that never arrived) and says why Acquire failed. It runs even
// though ctx may be done: a waiter whose client left must not block the line.
func (l *Limiter) abandon(ctx, waitCtx context.Context, id string, cause error) error {
	leave := func() {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if err := leaveScript.Run(lctx, l.rdb, l.queueKeys(), id, l.keys.notify).Err(); err != nil {
			l.m.redisErrors.Inc()
			l.cfg.Logger.Warn("ratelimit: leaving the queue failed; the entry expires by itself",
				"request", id, "err", err)
		}
	}
	switch {
	case ctx.Err() != nil:
		leave()
		return ctx.Err()
	case waitCtx.Err() != nil:
		leave()
		l.m.rejections.WithLabelValues(reasonTimeout).Inc()
		return ErrTimeout
	}
	// Redis just failed: leaving would likely fail slowly too, and the
	// fallback should not wait for it. The marker expiry is the backstop.
	go leave()
	l.m.redisErrors.Inc()
	return &redisError{cause}
}

// acquireLocal takes a permit from the in-process fallback semaphore.
// While held it tries to renew itself in Redis, which creates it there once
// Redis answers again (renew.lua's force): from then on new grants on every
// instance count it, and its release gives it back there too.
func (l *Limiter) acquireLocal(ctx, waitCtx context.Context, id, user string) (*Permit, error) {
	if err := l.local.acquire(waitCtx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l.m.rejections.WithLabelValues(reasonTimeout).Inc()
		return nil, ErrTimeout
	}
	pl := l.lease(id, user)
	pl.local, pl.inRedis = true, new(atomic.Bool)
	p := &Permit{local: true, release: func(ctx context.Context) {
		l.local.release()
		if pl.inRedis.Load() {
			// Counted in Redis since it answered again: give it back there.
			if err := releaseScript.Run(ctx, l.rdb, l.keys.releaseKeys(), id, l.keys.notify).Err(); err != nil {
				l.m.redisErrors.Inc()
				pl.releaseLater()
			}
		}
	}}
	p.renewal = pl.renew()
	return p, nil
}

// redisPermit returns the permit Redis granted to request id of user, and
// counts it among this instance's Redis permits in flight, which the local
// policy's share takes into account.
func (l *Limiter) redisPermit(id, user string) *Permit {
	l.local.redisHeld(1)
	pl := l.lease(id, user)
	pl.done = func() { l.local.redisHeld(-1) }
	return newRedisPermit(pl)
}

func (l *Limiter) lease(id, user string) permitLease {
	return permitLease{rdb: l.rdb, keys: l.keys, id: id, user: user,
		duration: l.cfg.Lease, log: l.cfg.Logger, m: l.m, fence: l.fence, failed: l.local.failed}
}

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
