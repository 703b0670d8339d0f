package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	// until it has room; granted: the tokens reserved. Granted: the place
	// held (any limiter).
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
		if len(n) >= 6 { // the tokens reserved (a budget's) and the place
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
	return []string{l.keys.queue, l.keys.permits, l.keys.users, l.keys.owners, l.keys.held, l.keys.deadlines, l.keys.entry, l.keys.levels}
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
	ks := []string{l.keys.seq, l.keys.queue, l.keys.permits, l.keys.users, l.keys.owners, l.keys.held, l.keys.deadlines, l.keys.entry, l.keys.levels}
	args := []any{id, user, l.max(c), l.cfg.Lease.Milliseconds(), ttl.Milliseconds(),
		l.cfg.MaxQueue, l.cfg.MaxQueuedPerUser, headWindow, c.Level, max(l.cfg.MaxRunningPerUser, 0), fmt.Sprintf("%.0f", c.place)}
	// A budget's key and arguments follow (budget.go).
	if bk, bargs := l.budgetEnqueueArgs(c); bk != "" {
		ks, args = append(ks, bk), append(args, bargs...)
	}
	return l.runClaim(ctx, enqueueScript, ks, args)
}

func (l *Limiter) claim(ctx context.Context, id string, c Class) (claimReply, error) {
	ks, args := l.queueKeys(), []any{id, l.max(c), l.cfg.Lease.Milliseconds(), headWindow, max(l.cfg.MaxRunningPerUser, 0)}
	// A budget's key and arguments follow (budget.go).
	if l.cfg.Budget.enabled() {
		ks, args = append(ks, l.keys.budget()), append(append(args, l.cfg.Budget.args()...), c.budgetReserve())
	}
	return l.runClaim(ctx, claimScript, ks, args)
}

// runClaim runs enqueue.lua or claim.lua with the fence's key and arguments
// after ks and args (they go last, fence.go) and decodes the reply.
func (l *Limiter) runClaim(ctx context.Context, script *redis.Script, ks []string, args []any) (claimReply, error) {
	v, err := script.Run(ctx, l.rdb, l.fence.withKey(ks...), l.fence.withArgs(args...)...).Slice()
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
			p := l.redisPermit(id, user)
			p.score = res.score // the place, for a retry (Cost.Retry)
			return l.budgetPermit(p, id, c, res), nil
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
			if err := releaseScript.Run(ctx, l.rdb, l.keys.queueReleaseKeys(), id, l.keys.notify).Err(); err != nil {
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
	return permitLease{rdb: l.rdb, keys: l.keys, id: id, user: user, queued: true,
		duration: l.cfg.Lease, log: l.cfg.Logger, m: l.m, fence: l.fence, failed: l.local.failed}
}
