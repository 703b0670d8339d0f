package ratelimit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// releaseTimeout bounds a Release: it runs after the request's context may be
// gone, and a permit that cannot be released in time expires with its lease.
const releaseTimeout = 3 * time.Second

// Permit is the right to run one chat generation (or upload). Hold it for the
// whole piece of work and call Release when done; while held, a Redis-backed
// permit renews its lease every lease/3 in the background.
type Permit struct {
	release func(ctx context.Context)
	once    sync.Once
	local   bool
	renewal *lease.Renewer // nil for local permits

	// A budgeted limiter's permit (budget.go): its place in the queue, for
	// a retry, and the tokens its call spent (-1: as reserved).
	score    float64
	used     int
	usedOnce sync.Once
}

// Release gives the permit back and wakes the waiters. It is safe to call
// more than once and from any goroutine; calls after the first do nothing.
func (p *Permit) Release() {
	p.once.Do(func() {
		// Stop cancels a renewal in progress and waits for it, so no
		// renewal logs the permit lost because of this release.
		if p.renewal != nil {
			p.renewal.Stop()
		}
		if p.release != nil {
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			p.release(ctx)
		}
	})
}

// Local reports whether the permit came from the in-process fallback
// semaphore (PolicyLocal while Redis was failing) rather than from Redis.
func (p *Permit) Local() bool { return p.local }

// permitLease is the Redis side of a permit: its members and the script keys.
type permitLease struct {
	rdb      redis.UniversalClient
	keys     keys
	id       string
	duration time.Duration
	log      *slog.Logger
	m        *metrics
}

// newRedisPermit returns a permit for a lease already granted in Redis and
// starts its renewal.
func newRedisPermit(l permitLease) *Permit {
	p := &Permit{release: func(ctx context.Context) {
		n, err := releaseScript.Run(ctx, l.rdb, l.keys.releaseKeys(), l.id, l.keys.notify).Int()
		if err != nil {
			l.m.redisErrors.Inc()
			l.log.Warn("ratelimit: release failed; the permit expires with its lease",
				"permit", l.id, "lease", l.duration, "err", err)
			return
		}
		l.m.permitsInUse.Set(float64(n))
	}}
	every := l.duration / 3
	// A failed call is retried at the next turn: two more chances remain
	// before the lease ends.
	p.renewal = lease.Every(context.Background(), every, func(ctx context.Context) time.Duration {
		callCtx, cancel := context.WithTimeout(ctx, every)
		held, err := renewScript.Run(callCtx, l.rdb, []string{l.keys.permits}, l.id, l.duration.Milliseconds()).Int()
		cancel()
		switch {
		case ctx.Err() != nil:
			return 0 // released meanwhile
		case err != nil:
			l.m.redisErrors.Inc()
			l.log.Warn("ratelimit: lease renewal failed", "permit", l.id, "err", err)
		case held == 0:
			// The lease expired while Redis was unreachable, or Redis lost
			// its data: the slot may be someone else's now. The work goes
			// on (stopping it would not give the slot back); renewing
			// would overcommit, so the renewal ends here.
			l.log.Warn("ratelimit: permit lost before release", "permit", l.id)
			return 0
		}
		return every
	})
	return p
}
