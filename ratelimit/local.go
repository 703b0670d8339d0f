package ratelimit

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragent-go/ragent/internal/lease"
)

// presenceScript keeps the set of live instances of a limiter (presence.lua).
var presenceScript = lease.Script(luaFiles, "clock.lua", "presence.lua")

// localSemaphore is PolicyLocal's fallback: while Redis is away an instance
// grants at most its share of MaxConcurrent, from the number of live
// instances it last saw in Redis, so that all instances together stay
// within MaxConcurrent. The share of an instance of rank r among k is
// N/k, plus one for the first N mod k ranks: the shares add up to N. An
// instance that never reached Redis knows of no other and takes all N.
//
// The share covers every permit of the instance still in flight, not only
// the local ones: Redis permits granted before the outage run on while it
// lasts, so they take their place in the share until released (without
// them, three instances with N = 4 once ran 7 calls at once).
//
// And the shared queue gives permits to whichever instance asks, so when
// Redis goes an instance may hold more than its share while another holds
// less; the first keeps its holders running, and were the second to fill
// its share the instances together would run more than N (the failover
// test, RELIABILITY.md, saw 5 with N = 4, and with one busy instance 7).
// What each other instance held at that moment cannot be known without
// Redis (a snapshot of the last heartbeat is already stale under load). So
// among several instances each is bounded by what it held itself when it
// first found Redis failing (a grant, renewal, release or heartbeat that
// failed), and by its share: min(share, in flight then).
// Its holders that end are replaced by local permits, up to that bound;
// since nothing is granted from Redis while it is away, the bounds add up
// to at most N. An instance that held nothing then grants nothing until
// Redis answers (its requests wait, then get ErrTimeout); a lone instance
// (or one that never reached Redis) takes its share, all N. The bound is
// lifted as soon as a script reaches Redis again.
type localSemaphore struct {
	id    string // this instance among the live ones
	max   int
	share atomic.Int64
	live  atomic.Int64 // live instances last seen (0: never reached Redis)

	mu    sync.Mutex
	held  int           // local permits held
	redis int           // Redis permits of this instance in flight
	away  bool          // Redis failed, and has not answered since
	bound int           // while away: the permits this instance may have in flight
	free  chan struct{} // closed and replaced at each release
}

func newLocalSemaphore(max int) *localSemaphore {
	s := &localSemaphore{id: rand.Text(), max: max, free: make(chan struct{})}
	s.share.Store(int64(max))
	return s
}

// see records that the instance of rank (0-based) was one of live instances.
func (s *localSemaphore) see(live, rank int) {
	if live < 1 {
		return
	}
	share := s.max / live
	if rank < s.max%live {
		share++
	}
	s.share.Store(int64(share))
	s.live.Store(int64(live))
}

// failed records that Redis failed. The first failure since Redis last
// answered fixes the bound: the share, and among several instances no more
// than this instance had in flight at that moment.
func (s *localSemaphore) failed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.away {
		return
	}
	s.away = true
	s.bound = int(s.share.Load())
	if s.live.Load() > 1 {
		s.bound = min(s.bound, s.held+s.redis)
	}
}

// answered records that a script reached Redis: the outage's bound is
// lifted (Redis' own bound holds again).
func (s *localSemaphore) answered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.away {
		s.away = false
		s.wake()
	}
}

// acquire takes a local permit, waiting until one within the bound is free
// or waitCtx ends (then it returns waitCtx's error).
func (s *localSemaphore) acquire(waitCtx context.Context) error {
	for {
		s.mu.Lock()
		bound := int(s.share.Load())
		if s.away {
			bound = s.bound
		}
		if s.held+s.redis < bound {
			s.held++
			s.mu.Unlock()
			return nil
		}
		free := s.free
		s.mu.Unlock()
		select {
		case <-free:
		case <-waitCtx.Done():
			return waitCtx.Err()
		}
	}
}

func (s *localSemaphore) release() {
	s.mu.Lock()
	s.held--
	s.wake()
	s.mu.Unlock()
}

// redisHeld counts a Redis permit of this instance granted (+1) or
// released (-1).
func (s *localSemaphore) redisHeld(delta int) {
	s.mu.Lock()
	s.redis += delta
	if delta < 0 {
		s.wake()
	}
	s.mu.Unlock()
}

// wake wakes the waiters; s.mu is held.
func (s *localSemaphore) wake() {
	close(s.free)
	s.free = make(chan struct{})
}

// heartbeat registers this instance among the limiter's live ones every
// third of a lease until ctx ends, and updates its local share.
func (l *Limiter) heartbeat(ctx context.Context) {
	every := l.cfg.Lease / 3
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		v, err := presenceScript.Run(cctx, l.rdb, []string{l.keys.instances}, l.local.id, l.cfg.Lease.Milliseconds()).Int64Slice()
		cancel()
		if err == nil && len(v) == 2 {
			l.local.see(int(v[0]), int(v[1]))
			l.local.answered()
		} else if ctx.Err() == nil {
			l.local.failed()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
