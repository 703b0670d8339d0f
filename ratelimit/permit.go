package ratelimit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseTimeout bounds a Release: it runs after the request's context may be
// gone, and a permit that cannot be released in time expires with its lease.
const releaseTimeout = 3 * time.Second

// Permit is the right to run one chat generation (or upload). Hold it for the
// whole piece of work and call Release when done; while held, a Redis-backed
// permit renews its lease every lease/3 in the background.
type Permit struct {
	release  func(ctx context.Context)
	once     sync.Once
	stop     chan struct{}
	lost     chan struct{}
	lostOnce sync.Once
	local    bool
}

// Release gives the permit back and wakes the waiters. It is safe to call
// more than once and from any goroutine; calls after the first do nothing.
func (p *Permit) Release() {
	p.once.Do(func() {
		// Renewal is not awaited: renew.lua never recreates a removed
		// permit, so a renewal racing this release is harmless.
		close(p.stop)
		if p.release != nil {
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			p.release(ctx)
		}
	})
}

// Lost is closed when a renewal finds the permit gone (its lease expired
// while Redis was unreachable, or Redis lost its data), so the slot may be
// held by someone else. Callers may keep going or stop; the limiter does not
// decide for them. It is never closed for local or pass-through permits.
func (p *Permit) Lost() <-chan struct{} { return p.lost }

// Local reports whether the permit came from the in-process fallback
// semaphore (PolicyLocal while Redis was failing) rather than from Redis.
func (p *Permit) Local() bool { return p.local }

func newPermit(release func(ctx context.Context)) *Permit {
	return &Permit{release: release, stop: make(chan struct{}), lost: make(chan struct{})}
}

// lease is the Redis side of a permit: its members and the script keys.
type lease struct {
	rdb      redis.UniversalClient
	keys     keys
	id       string
	duration time.Duration
	log      *slog.Logger
	m        *metrics
}

// newRedisPermit returns a permit for a lease already granted in Redis and
// starts its renewal.
func newRedisPermit(l lease) *Permit {
	p := newPermit(func(ctx context.Context) {
		n, err := releaseScript.Run(ctx, l.rdb, l.keys.releaseKeys(), l.id, l.keys.notify).Int()
		if err != nil {
			l.m.redisErrors.Inc()
			l.log.Warn("ratelimit: release failed; the permit expires with its lease",
				"permit", l.id, "lease", l.duration, "err", err)
			return
		}
		l.m.permitsInUse.Set(float64(n))
	})
	go p.renew(l)
	return p
}

// renew extends the lease every third of it until Release. A failed call is
// retried at the next tick: two more chances remain before the lease ends.
func (p *Permit) renew(l lease) {
	every := l.duration / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		held, err := renewScript.Run(ctx, l.rdb, []string{l.keys.permits}, l.id, l.duration.Milliseconds()).Int()
		cancel()
		switch {
		case err != nil:
			l.m.redisErrors.Inc()
			l.log.Warn("ratelimit: lease renewal failed", "permit", l.id, "err", err)
		case held == 0:
			select {
			case <-p.stop:
				return // released meanwhile
			default:
			}
			l.log.Warn("ratelimit: permit lost before release", "permit", l.id)
			p.lostOnce.Do(func() { close(p.lost) })
			return
		}
	}
}
