package idgen

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// workerLease holds a worker id in Redis as {prefix}snowflake:worker:{id} = token.
type workerLease struct {
	rdb    redis.UniversalClient
	prefix string
	token  string
	ttl    time.Duration
	renew  time.Duration // renewal period
	// hold is how long a newly taken worker id waits before it issues IDs:
	// an earlier holder whose key a failover lost renews within one period
	// and one renewal's timeout, sees our token and stops; the third period
	// keeps its last IDs and our first apart even if the two clocks
	// disagree by up to a period.
	hold time.Duration
	// margin is how much earlier than Redis we consider the lease over, and
	// how long a released key lingers: the clock disagreement between
	// instances we tolerate without risking a duplicate ID.
	margin time.Duration
	log    *slog.Logger
	// pending is a worker id taken but still in its hold (-1: none), and
	// pendingSince when it was taken by our clock. Only the renewals touch
	// them, and they run one at a time.
	pending      int64
	pendingSince time.Time
	renewer      *lease.Renewer // until Close
}

// Lease returns a generator whose worker id is leased in Redis under prefix.
// It scans the ids from a random start, so instances starting together
// rarely contend, and fails with ErrNoWorker when all 1024 are taken. It
// returns once it has taken a worker id; the first IDs wait for its hold
// (three renewal periods, see workerLease.hold). The lease is renewed in the
// background until Close; if it is lost, Next stops issuing IDs until a
// worker id (perhaps another one) is taken and held again.
func Lease(ctx context.Context, rdb redis.UniversalClient, prefix string, cfg Config) (*Generator, error) {
	c := cfg.withDefaults()
	if c.LeaseTTL < 30*time.Millisecond {
		return nil, fmt.Errorf("idgen: lease TTL %s too short", c.LeaseTTL)
	}
	if margin := c.LeaseTTL / 10; c.LeaseRenew <= 0 || c.LeaseRenew >= c.LeaseTTL-margin {
		return nil, fmt.Errorf("idgen: lease renewal every %s must be shorter than the lease TTL %s less its margin %s",
			c.LeaseRenew, c.LeaseTTL, margin)
	}
	host, _ := os.Hostname()
	l := &workerLease{
		rdb:     rdb,
		prefix:  prefix,
		token:   host + ":" + strconv.Itoa(os.Getpid()) + ":" + crand.Text(),
		ttl:     c.LeaseTTL,
		renew:   c.LeaseRenew,
		hold:    3 * c.LeaseRenew,
		margin:  c.LeaseTTL / 10,
		log:     c.Logger,
		pending: -1,
	}
	g := newGenerator(c)
	g.lease = l
	if err := g.take(ctx, -1); err != nil {
		return nil, err
	}
	l.renewer = g.keepLease()
	return g, nil
}

func (l *workerLease) key(worker int64) string {
	return l.prefix + "snowflake:worker:" + strconv.FormatInt(worker, 10)
}

// take leases the first free worker id from first (a random start when
// negative) and puts it in its hold.
func (g *Generator) take(ctx context.Context, first int64) error {
	l := g.lease
	worker, sent, err := l.acquire(ctx, g.now, first)
	if err != nil {
		return err
	}
	l.pending, l.pendingSince = worker, sent
	g.mu.Lock()
	g.confirmBy = sent.Add(l.hold + l.renew)
	g.mu.Unlock()
	l.log.Info("snowflake worker id leased; held before use", "worker", worker, "hold", l.hold)
	return nil
}

// acquire takes the first free worker id from first (a random start when
// negative) and returns it with the time, by our clock, the command that
// took it was sent.
func (l *workerLease) acquire(ctx context.Context, now func() time.Time, first int64) (int64, time.Time, error) {
	start := first
	if start < 0 {
		start = rand.Int64N(MaxWorkerID + 1)
	}
	for i := range int64(MaxWorkerID + 1) {
		worker := (start + i) % (MaxWorkerID + 1)
		sent := now()
		ok, err := l.rdb.SetNX(ctx, l.key(worker), l.token, l.ttl).Result()
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("idgen: lease worker id: %w", err)
		}
		if ok {
			return worker, sent, nil
		}
	}
	return 0, time.Time{}, fmt.Errorf("%w: all %d worker ids are leased", ErrNoWorker, MaxWorkerID+1)
}

// expiry is when a lease set or renewed by a command sent at sent runs out by
// our clock: Redis started its TTL later than sent, and we stop a margin
// earlier still.
func (l *workerLease) expiry(sent time.Time) time.Time { return sent.Add(l.ttl - l.margin) }

func (l *workerLease) release(ctx context.Context, worker int64) error {
	if _, err := lease.Release(ctx, l.rdb, l.key(worker), l.token, l.margin); err != nil {
		return fmt.Errorf("idgen: release worker id %d: %w", worker, err)
	}
	return nil
}

// keepLease renews the lease every renewal period, confirms a new worker id
// at the end of its hold, and takes a worker id again (retrying more often)
// whenever the lease is lost. While Redis does not answer it retries as
// often; the IDs go on until the lease runs out by our clock.
func (g *Generator) keepLease() *lease.Renewer {
	period := g.lease.renew
	return lease.Every(context.Background(), period, func(ctx context.Context) time.Duration {
		opCtx, cancel := context.WithTimeout(ctx, period)
		defer cancel()
		_, next := g.renewOrAcquire(opCtx)
		return next
	})
}

// renewOrAcquire renews the worker id held or in its hold, or takes one. It
// reports whether the generator holds a confirmed lease afterwards, and when
// to call it next.
func (g *Generator) renewOrAcquire(ctx context.Context) (held bool, next time.Duration) {
	l := g.lease
	retry := min(l.renew, 500*time.Millisecond)
	g.mu.Lock()
	worker := g.worker
	g.mu.Unlock()
	if worker < 0 {
		worker = l.pending
	}

	if worker >= 0 {
		sent := g.now()
		ok, err := lease.Renew(ctx, l.rdb, l.key(worker), l.token, l.ttl)
		switch {
		case err != nil:
			// Keep the worker id: if Redis comes back before the key
			// expires, renewal resumes. Meanwhile Next refuses to issue
			// IDs once the lease runs out by our own clock. A worker id in
			// its hold stays there: silence confirms nothing.
			l.log.Warn("snowflake lease renewal failed", "worker", worker, "err", err)
			return false, retry
		case ok && worker == l.pending:
			// Renewed through its hold, so that a hold longer than the
			// TTL cannot let the key expire before we use it.
			if wait := l.hold - sent.Sub(l.pendingSince); wait > 0 {
				return false, min(wait, l.renew)
			}
			l.pending = -1
			g.setLease(worker, l.expiry(sent))
			l.log.Info("snowflake worker id confirmed", "worker", worker)
			return true, l.renew
		case ok:
			g.extendLease(worker, l.expiry(sent))
			return true, l.renew
		}
		// Redis answered without our token: the key expired, another
		// instance took it, or a failover lost our write. Stop at once.
		l.log.Warn("snowflake worker id lease lost; re-acquiring", "worker", worker)
		l.pending = -1
		g.dropLease(worker)
	}

	// A lost lease tries its own id first: when Redis lost its data, every
	// instance takes back its own id, and none takes another's that is
	// still in use (unless started meanwhile).
	if err := g.take(ctx, worker); err != nil {
		l.log.Warn("snowflake worker id not re-acquired", "err", err)
		return false, retry
	}
	return false, l.renew
}

func (g *Generator) setLease(worker int64, validUntil time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.worker, g.validUntil, g.confirmBy = worker, validUntil, time.Time{}
	g.advance = true
	g.notifyLocked()
}
func (g *Generator) extendLease(worker int64, validUntil time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.worker == worker {
		g.validUntil = validUntil
		g.notifyLocked()
	}
}

func (g *Generator) dropLease(worker int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.worker == worker {
		g.worker = -1
	}
}

// notifyLocked wakes callers of Next waiting for a lease.
func (g *Generator) notifyLocked() {
	if g.closed {
		return
	}
	close(g.changed)
	g.changed = make(chan struct{})
}
