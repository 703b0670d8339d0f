package ratelimit

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragent-go/ragent/internal/lease"
)

// presenceScript keeps the set of live instances of a limiter and the
// permits each has in flight (presence.lua).
var presenceScript = lease.Script(luaFiles, "clock.lua", "presence.lua")

// maxBeatEvery bounds the presence heartbeat's period: what the other
// instances held, as this one knows it when Redis goes away, is at most
// that old.
const maxBeatEvery = 500 * time.Millisecond

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
// And an instance that held more than its share when Redis went away (the
// shared queue gives permits to whichever instance asks) keeps those
// holders running: the others' shares must make room for them. So each
// instance publishes its permits in flight at every heartbeat (and at once
// when the number changes), and learns in reply the excess: how many
// permits the other live instances held beyond their shares. Its local
// bound is its share less that excess. The shares less every other
// instance's excess add up to at most N whatever the holdings (an instance
// over its share grants nothing until it is back under; one under it gives
// up the others' whole excess), so the instances together stay within N.
// The excess is as old as the last heartbeat before the outage (at most
// maxBeatEvery, or a round trip after a change); the others' releases
// during the outage are not seen, so the bound errs on the low side until
// Redis answers again.
type localSemaphore struct {
	id     string // this instance among the live ones
	max    int
	share  atomic.Int64
	excess atomic.Int64 // the other instances' permits beyond their shares
	// changed wakes the heartbeat when the permits in flight change.
	changed chan struct{}

	mu    sync.Mutex
	held  int           // local permits held
	redis int           // Redis permits of this instance in flight
	free  chan struct{} // closed and replaced at each release
}

func newLocalSemaphore(max int) *localSemaphore {
	s := &localSemaphore{id: rand.Text(), max: max, free: make(chan struct{}), changed: make(chan struct{}, 1)}
	s.share.Store(int64(max))
	return s
}

// see records that the instance of rank (0-based) was one of live
// instances, and the others' excess over their shares.
func (s *localSemaphore) see(live, rank, excess int) {
	if live < 1 {
		return
	}
	share := s.max / live
	if rank < s.max%live {
		share++
	}
	s.share.Store(int64(share))
	s.excess.Store(int64(max(excess, 0)))
	s.mu.Lock()
	s.wake() // a lower excess may let a waiter in
	s.mu.Unlock()
}

// bound is how many permits this instance may have in flight while Redis
// is away: its share less the others' excess.
func (s *localSemaphore) bound() int {
	return int(s.share.Load() - s.excess.Load())
}

// inFlight is the number of permits of this instance in flight, local and
// from Redis.
func (s *localSemaphore) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held + s.redis
}

// acquire takes a local permit, waiting until one of the bound is free or
// waitCtx ends (then it returns waitCtx's error).
func (s *localSemaphore) acquire(waitCtx context.Context) error {
	for {
		s.mu.Lock()
		if s.held+s.redis < s.bound() {
			s.held++
			s.mu.Unlock()
			s.notify()
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
	s.notify()
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
	s.notify()
}

// wake wakes the waiters; s.mu is held.
func (s *localSemaphore) wake() {
	close(s.free)
	s.free = make(chan struct{})
}

// notify tells the heartbeat that the permits in flight changed.
func (s *localSemaphore) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// heartbeat registers this instance among the limiter's live ones, with
// its permits in flight, every third of a lease (at most maxBeatEvery)
// and whenever that number changes, until ctx ends; it updates the local
// share and the others' excess from the reply. After a failed beat only
// the period retries, so an outage is not hammered at every grant.
func (l *Limiter) heartbeat(ctx context.Context) {
	every := min(l.cfg.Lease/3, maxBeatEvery)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		v, err := presenceScript.Run(cctx, l.rdb, []string{l.keys.instances, l.keys.inflight},
			l.local.id, l.cfg.Lease.Milliseconds(), l.local.inFlight(), l.cfg.MaxConcurrent).Int64Slice()
		cancel()
		ok := err == nil && len(v) == 3
		if ok {
			l.local.see(int(v[0]), int(v[1]), int(v[2]))
		}
		changed := l.local.changed
		if !ok {
			changed = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
		}
	}
}
