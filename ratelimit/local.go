package ratelimit

import (
	"context"
	"crypto/rand"
	"fmt"
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
// lifted as soon as a script reaches Redis again. The live count an
// instance last saw must include every instance running Redis permits: a
// newcomer waits until the others have counted it (awaitSeen).
type localSemaphore struct {
	id    string // this instance among the live ones
	max   int
	share atomic.Int64
	live  atomic.Int64 // live instances last seen (0: never reached Redis)
	// seenAt (unix ns) is when live was last confirmed; keep is how long a
	// lower count is distrusted (see).
	seenAt atomic.Int64
	keep   time.Duration
	// joined is set once this instance registered among the live ones;
	// holdUntil (unix ns) is a newcomer's hold (awaitSeen).
	joined    atomic.Bool
	holdUntil atomic.Int64

	mu    sync.Mutex
	held  int           // local permits held
	redis int           // Redis permits of this instance in flight
	away  bool          // Redis failed, and has not answered since
	bound int           // while away: the permits this instance may have in flight
	free  chan struct{} // closed and replaced at each release
}

func newLocalSemaphore(max int, lease time.Duration) *localSemaphore {
	s := &localSemaphore{id: rand.Text(), max: max, keep: lease, free: make(chan struct{})}
	s.share.Store(int64(max))
	return s
}

// see records that the instance of rank (0-based) was one of live instances
// at now.
//
// A count lower than the last one is believed only once it has held for a
// lease (the time an instance that left takes to drop out of the set
// anyway). A Redis back without its data (restarted empty, or a replica
// promoted without the last writes) has lost the set, and the instances
// come back into it one beat at a time: the first to beat would see itself
// alone and take a share of all N, beside the others' permits, at the next
// failure (the failover test, RELIABILITY.md, saw 5 model calls with N = 4
// just after Redis came back empty from a 20 s outage).
func (s *localSemaphore) see(live, rank int, now time.Time) {
	if live < 1 {
		return
	}
	if prev := s.live.Load(); int64(live) < prev && now.Sub(time.Unix(0, s.seenAt.Load())) < s.keep {
		return
	}
	s.seenAt.Store(now.UnixNano())
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
// beatEvery until ctx ends, and updates its local share.
func (l *Limiter) heartbeat(ctx context.Context) {
	for {
		if err := l.beat(ctx, false); err != nil && ctx.Err() == nil {
			l.local.failed()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(beatEvery(l.cfg.Lease)):
		}
	}
}

// beatEvery is how often an instance renews its presence: as often as its
// permits renew (fence.go), so that a newcomer's hold (awaitSeen) is short.
func beatEvery(lease time.Duration) time.Duration { return renewEvery(lease) }

// beat registers this instance among the live ones once (only if it is not
// registered yet, with first) and takes its share from the reply. A
// newcomer that finds others starts its hold (awaitSeen).
func (l *Limiter) beat(ctx context.Context, first bool) error {
	l.beatMu.Lock()
	defer l.beatMu.Unlock()
	if first && l.local.joined.Load() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, beatEvery(l.cfg.Lease))
	defer cancel()
	v, err := presenceScript.Run(cctx, l.rdb, []string{l.keys.instances}, l.local.id, l.cfg.Lease.Milliseconds()).Int64Slice()
	if err != nil {
		return err
	}
	if len(v) != 3 {
		return fmt.Errorf("ratelimit: unexpected presence reply %v", v)
	}
	l.local.see(int(v[0]), int(v[1]), time.Now())
	if v[2] == 1 && v[0] > 1 {
		l.local.holdUntil.Store(time.Now().Add(beatEvery(l.cfg.Lease) + fenceSlack).UnixNano())
	}
	l.local.joined.Store(true)
	l.answered()
	return nil
}

// awaitSeen holds a grant from Redis (PolicyLocal) until this instance is
// registered among the live ones and every other instance has counted it.
//
// Each instance learns the live count from its own heartbeat, so one that
// ran before a newcomer joined believes the older count until its next
// beat, possibly that it is alone: a share of all N whatever it holds
// (localSemaphore). Were the newcomer to run permits from Redis meanwhile
// and Redis go, the two would run more than N between them: the failover
// test (RELIABILITY.md) killed Redis within a heartbeat of the last start
// and saw 5 model calls with N = 4, the first instance bounded by 4 beside
// the others' Redis permits. So a newcomer that finds other instances
// takes no permit from Redis for one heartbeat period and a second, by
// when each of them has beaten and counts it; its requests wait meanwhile
// (a lone first instance, or one back beside none, does not wait).
func (l *Limiter) awaitSeen(waitCtx context.Context) error {
	// Once joined, only the hold is read: an Acquire never waits for
	// beatMu behind a heartbeat's round trip to Redis.
	if !l.local.joined.Load() {
		if err := l.beat(waitCtx, true); err != nil {
			return err
		}
	}
	d := time.Until(time.Unix(0, l.local.holdUntil.Load()))
	if d <= 0 {
		return nil
	}
	hold := time.NewTimer(d)
	defer hold.Stop()
	select {
	case <-hold.C:
		return nil
	case <-waitCtx.Done():
		return waitCtx.Err()
	}
}
