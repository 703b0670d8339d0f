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
// gets one of MaxConcurrent permits if one is free within MaxWait, in no
// particular order. Redis failures are always ErrUnavailable (an upload is
// refused rather than run unbounded).
type Semaphore struct {
	rdb   redis.UniversalClient
	keys  keys
	cfg   Config
	m     *metrics
	n     *notifier
	fence *fence
}

// NewSemaphore returns a semaphore named name (the upload one is "upload")
// whose keys start with prefix (empty means "ragent:"). It reads cfg's
// MaxConcurrent, MaxWait, Lease and PollInterval, whose zero values take the
// upload defaults (10 permits, a 5 s wait, a 300 s lease renewed while held).
func NewSemaphore(rdb redis.UniversalClient, prefix, name string, cfg Config) *Semaphore {
	cfg = cfg.withDefaults(5*time.Second, 300*time.Second)
	k := newKeys(prefix, name)
	m, n := cfg.setup(rdb, k, name)
	return &Semaphore{rdb: rdb, keys: k, cfg: cfg, m: m, n: n, fence: newFence(k, cfg.Lease)}
}

// Run holds the notification subscription until ctx ends.
func (s *Semaphore) Run(ctx context.Context) error { return s.n.run(ctx) }

// Acquire takes a permit, waiting up to MaxWait. It returns ErrTimeout when
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
	start := s.cfg.Now()
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.MaxWait)
	defer cancel()
	w := s.n.add()
	defer s.n.remove(w)
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	for {
		// The fence's key and arguments go last (fence.go).
		v, err := tryScript.Run(waitCtx, s.rdb, s.fence.withKey(s.keys.permits),
			s.fence.withArgs(holderID, s.cfg.MaxConcurrent, s.cfg.Lease.Milliseconds())...).Int64Slice()
		if err == nil {
			s.fence.saw()
		}
		switch {
		case waitCtx.Err() != nil:
			return nil, s.giveUp(ctx, holderID)
		case err != nil:
			s.m.redisErrors.Inc()
			s.m.rejections.WithLabelValues(reasonUnavailable).Inc()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case len(v) < 2:
			return nil, fmt.Errorf("ratelimit: unexpected script reply %v", v)
		}
		s.m.permitsInUse.Set(float64(v[1]))
		if v[0] == 1 {
			s.m.waitSeconds.Observe(s.cfg.Now().Sub(start).Seconds())
			return newRedisPermit(permitLease{rdb: s.rdb, keys: s.keys, fence: s.fence,
				id: holderID, duration: s.cfg.Lease, log: s.cfg.Logger, m: s.m}), nil
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
