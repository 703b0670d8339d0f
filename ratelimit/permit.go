package ratelimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// releaseTimeout bounds a Release: it runs after the request's context may be
// gone, and a permit that cannot be released in time expires with its lease.
const releaseTimeout = 3 * time.Second

// Permit is the right to run one chat generation (or upload). Hold it for the
// whole piece of work and call Release when done; while held, a Redis-backed
// permit renews its lease every min(lease/3, 2 s) in the background (a
// local one too, so Redis counts it once it answers again).
type Permit struct {
	release func(ctx context.Context)
	once    sync.Once
	local   bool
	renewal *lease.Renewer // nil for local permits

	// Its place in the queue, for a retry (Cost.Retry), and, a budgeted
	// limiter's permit (budget.go), the tokens its call spent (-1: as
	// reserved).
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
	fence    *fence
	// user is the permit's owner for the limiter's bookkeeping when renew
	// re-creates it ("" for a semaphore's).
	user string
	// queued marks a limiter's permit: its release looks at the limiter's
	// queue and wakes nobody when it is empty (release.lua). A
	// semaphore's always wakes its waiters.
	queued bool
	// local marks a permit of the local policy: its renewals create it in
	// Redis once Redis answers, so new grants count it (renew.lua).
	local bool
	// inRedis (local permits) is set once a renewal reached Redis, so the
	// release gives the permit back there too.
	inRedis *atomic.Bool
	// done, if set, runs once at release (the local policy's count of the
	// Redis permits this instance holds).
	done func()
	// failed, if set, is told of every renewal or release that failed (the
	// local policy's outage bound, local.go).
	failed func()
}

func (l permitLease) redisFailed() {
	if l.failed != nil {
		l.failed()
	}
}

func (l permitLease) releaseKeys() []string {
	if l.queued {
		return l.keys.queueReleaseKeys()
	}
	return l.keys.releaseKeys()
}

// newRedisPermit returns a permit for a lease already granted in Redis and
// starts its renewal.
func newRedisPermit(l permitLease) *Permit {
	p := &Permit{release: func(ctx context.Context) {
		// Counted in flight until the release was tried: a release that
		// finds Redis gone fixes the outage bound with this permit in it.
		if l.done != nil {
			defer l.done()
		}
		n, err := releaseScript.Run(ctx, l.rdb, l.releaseKeys(), l.id, l.keys.notify).Int()
		if err != nil {
			l.redisFailed()
			l.m.redisErrors.Inc()
			l.log.Warn("ratelimit: release failed; retrying until Redis answers or the lease ends",
				"permit", l.id, "lease", l.duration, "err", err)
			l.releaseLater()
			return
		}
		l.m.permitsInUse.Set(float64(n))
	}}
	p.renewal = l.renew()
	return p
}

// releaseRetry is how often a release that failed is tried again.
const releaseRetry = 250 * time.Millisecond

// releaseLater retries a failed release in the background until it reaches
// Redis or the lease has run out (the permit is gone by then anyway). A
// release lost in a failover would otherwise keep its slot taken on the
// promoted replica for a whole lease: the failover test (RELIABILITY.md)
// saw chats time out in the queue behind such permits.
func (l permitLease) releaseLater() {
	go func() {
		end := time.Now().Add(l.duration)
		for time.Now().Before(end) {
			time.Sleep(releaseRetry)
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			n, err := releaseScript.Run(ctx, l.rdb, l.releaseKeys(), l.id, l.keys.notify).Int()
			cancel()
			if err == nil {
				l.m.permitsInUse.Set(float64(n))
				return
			}
		}
	}()
}

// renew starts the renewal of l. A failed call is retried at the next turn:
// two more chances remain before the lease ends.
func (l permitLease) renew() *lease.Renewer {
	every := renewEvery(l.duration)
	force, first := "0", every
	if l.local {
		// A local permit tries Redis soon, so that one granted just as
		// Redis came back is counted there before the fence lifts
		// (fence.go) and Redis grants its slot again.
		force, first = "1", min(every, releaseRetry)
	}
	return lease.Every(context.Background(), first, func(ctx context.Context) time.Duration {
		callCtx, cancel := context.WithTimeout(ctx, every)
		// The fence's key and arguments go last (fence.go).
		held, err := renewScript.Run(callCtx, l.rdb, l.fence.withKey(l.keys.permits, l.keys.owners, l.keys.held),
			l.fence.withArgs(l.id, l.duration.Milliseconds(), l.user, force)...).Int()
		cancel()
		if err == nil {
			l.fence.saw()
			if held > 0 && l.inRedis != nil {
				l.inRedis.Store(true)
			}
		} else if ctx.Err() == nil {
			l.redisFailed()
		}
		switch {
		case ctx.Err() != nil:
			return 0 // released meanwhile
		case err != nil && l.local:
			// Redis is still away: the local permit is retried quietly,
			// and soon, to be counted before the fence lifts (fence.go).
			return min(every, releaseRetry)
		case err != nil:
			l.m.redisErrors.Inc()
			l.log.Warn("ratelimit: lease renewal failed", "permit", l.id, "err", err)
			// Retried soon: after a failover the holder must re-assert
			// its permit within the fence's hold.
			return min(every, releaseRetry)
		case held == 2 && !l.local:
			// Redis lost the permit in a failover; the fence let its holder
			// take it back before any new grant.
			l.log.Warn("ratelimit: permit re-asserted after a failover", "permit", l.id)
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
}
