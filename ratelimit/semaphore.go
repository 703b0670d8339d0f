package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Semaphore is the lease semaphore without a queue, for uploads: a holder
// gets one of max permits if one is free within maxWait, in no particular
// order. Redis failures are always ErrUnavailable (an upload is refused
// rather than run unbounded).
type Semaphore struct {
	rdb     redis.UniversalClient
	keys    keys
	max     int
	lease   time.Duration
	maxWait time.Duration
	opts    options
	m       *metrics
	n       *notifier
	bg      background
}

// NewSemaphore returns a semaphore named name (the upload one is "upload")
// with max permits leased for lease and renewed while held; Acquire waits up
// to maxWait. Keys start with prefix (empty means "ragent:"). Zero values
// take the upload defaults: 10 permits, a 300 s lease, a 5 s wait.
func NewSemaphore(rdb redis.UniversalClient, prefix, name string, max int, lease, maxWait time.Duration, opts ...Option) *Semaphore {
	if max <= 0 {
		max = defaultMaxConcurrent
	}
	if lease <= 0 {
		lease = 300 * time.Second
	}
	if maxWait <= 0 {
		maxWait = 5 * time.Second
	}
	o, m := buildOptions(name, opts)
	k := newKeys(prefix, name)
	return &Semaphore{
		rdb: rdb, keys: k, max: max, lease: lease, maxWait: maxWait, opts: o, m: m,
		n: newNotifier(rdb, k.notify, o.pubsub, o.log),
	}
}

// Start runs the notification subscription in the background until ctx ends
// or Close is called.
func (s *Semaphore) Start(ctx context.Context) { s.bg.start(ctx, s.n.run) }

// Run holds the notification subscription until ctx ends.
func (s *Semaphore) Run(ctx context.Context) error { return s.n.run(ctx) }

// Close stops what Start started and waits for it.
func (s *Semaphore) Close() error { s.bg.stop(); return nil }

// Acquire takes a permit, waiting up to maxWait. It returns ErrTimeout when
// none frees up in time, ctx's error when ctx ends first, and ErrUnavailable
// when Redis fails.
//
// The permit's id is generated here, never taken from the caller: an id a
// client can choose (such as its X-Request-ID) would let requests sharing it
// count as one holder and pass the cap, and let one waiter's timeout release
// another request's permit.
func (s *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	holderID, err := newHolderID()
	if err != nil {
		return nil, err
	}
	start := s.opts.now()
	waitCtx, cancel := context.WithTimeout(ctx, s.maxWait)
	defer cancel()
	w := s.n.add()
	defer s.n.remove(w)
	poll := time.NewTicker(s.opts.poll)
	defer poll.Stop()
	for {
		v, err := tryScript.Run(waitCtx, s.rdb, []string{s.keys.permits},
			holderID, s.max, s.lease.Milliseconds()).Int64Slice()
		switch {
		case waitCtx.Err() != nil:
			return nil, s.giveUp(ctx, holderID)
		case err != nil:
			s.m.redisErrors.Inc()
			s.m.rejections.WithLabelValues(reasonUnavailable).Inc()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case len(v) != 2:
			return nil, fmt.Errorf("ratelimit: unexpected script reply %v", v)
		}
		s.m.permitsInUse.Set(float64(v[1]))
		if v[0] == 1 {
			s.m.waitSeconds.Observe(s.opts.now().Sub(start).Seconds())
			return newRedisPermit(permitLease{rdb: s.rdb, keys: s.keys,
				id: holderID, duration: s.lease, log: s.opts.log, m: s.m}), nil
		}
		select {
		case <-waitCtx.Done():
			return nil, s.giveUp(ctx, holderID)
		case <-poll.C:
		case <-w.wake:
		}
	}
}

// giveUp returns a permit a lost reply may have granted, and the reason.
func (s *Semaphore) giveUp(ctx context.Context, holderID string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := releaseScript.Run(rctx, s.rdb, s.keys.releaseKeys(), holderID, s.keys.notify).Err(); err != nil {
		s.m.redisErrors.Inc()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.m.rejections.WithLabelValues(reasonTimeout).Inc()
	return ErrTimeout
}

// Stats reads the semaphore's permits in use (QueueLength and OldestWait are
// always zero: there is no queue).
func (s *Semaphore) Stats(ctx context.Context) (Stats, error) {
	return readStats(ctx, s.rdb, s.keys)
}

// newHolderID returns a random permit id (128 bits, so ids of concurrent
// holders on any instance never collide).
func newHolderID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ratelimit: permit id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
