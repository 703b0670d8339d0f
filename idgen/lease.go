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
	// margin is how much earlier than Redis we consider the lease over, and
	// how long a released key lingers: the clock disagreement between
	// instances we tolerate without risking a duplicate ID.
	margin  time.Duration
	log     *slog.Logger
	renewer *lease.Renewer // until Close
}

// Lease returns a generator whose worker id is leased in Redis under prefix.
// It scans the ids from a random start, so instances starting together
// rarely contend, and fails with ErrNoWorker when all 1024 are taken. The
// lease is renewed in the background until Close; if it is lost, Next stops
// issuing IDs until a worker id (perhaps another one) is re-acquired.
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
		rdb:    rdb,
		prefix: prefix,
		token:  host + ":" + strconv.Itoa(os.Getpid()) + ":" + crand.Text(),
		ttl:    c.LeaseTTL,
		renew:  c.LeaseRenew,
		margin: c.LeaseTTL / 10,
		log:    c.Logger,
	}
	g := newGenerator(c)
	g.lease = l
	worker, validUntil, err := l.acquire(ctx, g.now, -1)
	if err != nil {
		return nil, err
	}
	g.setLease(worker, validUntil)
	l.log.Info("snowflake worker id leased", "worker", worker)

	l.renewer = g.keepLease()
	return g, nil
}

func (l *workerLease) key(worker int64) string {
	return l.prefix + "snowflake:worker:" + strconv.FormatInt(worker, 10)
}

// acquire takes the first free worker id from first (a random start when
// negative) and returns it with the time our lease on it runs out by our own
// clock.
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
			return worker, l.expiry(sent), nil
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

// keepLease renews the lease every renewal period, and re-acquires a worker
// id (retrying more often) whenever the lease is lost. While Redis does not
// answer it retries as often; the IDs go on until the lease runs out by our
// clock.
func (g *Generator) keepLease() *lease.Renewer {
	period := g.lease.renew
	retry := min(period, 500*time.Millisecond)
	return lease.Every(context.Background(), period, func(ctx context.Context) time.Duration {
		opCtx, cancel := context.WithTimeout(ctx, period)
		ok := g.renewOrAcquire(opCtx)
		cancel()
		if ok {
			return period
		}
		return retry
	})
}

// renewOrAcquire reports whether the generator holds a lease afterwards.
func (g *Generator) renewOrAcquire(ctx context.Context) bool {
	l := g.lease
	g.mu.Lock()
	worker := g.worker
	g.mu.Unlock()

	if worker >= 0 {
		sent := g.now()
		held, err := lease.Renew(ctx, l.rdb, l.key(worker), l.token, l.ttl)
		switch {
		case err != nil:
			// Keep the worker id: if Redis comes back before the key
			// expires, renewal resumes. Meanwhile Next refuses to issue
			// IDs once the lease runs out by our own clock.
			l.log.Warn("snowflake lease renewal failed", "worker", worker, "err", err)
			return false
		case held:
			g.extendLease(worker, l.expiry(sent))
			return true
		}
		l.log.Warn("snowflake worker id lease lost; re-acquiring", "worker", worker)
		g.dropLease(worker)
	}

	// A lost lease tries its own id first: when Redis lost its data, every
	// instance takes back its own id, and none takes another's that is
	// still in use (unless started meanwhile).
	worker, validUntil, err := l.acquire(ctx, g.now, worker)
	if err != nil {
		l.log.Warn("snowflake worker id not re-acquired", "err", err)
		return false
	}
	g.setLease(worker, validUntil)
	l.log.Info("snowflake worker id leased", "worker", worker)
	return true
}

func (g *Generator) setLease(worker int64, validUntil time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.worker, g.validUntil = worker, validUntil
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
