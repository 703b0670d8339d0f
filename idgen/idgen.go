// Package idgen issues Snowflake IDs: 41 bits of milliseconds since
// 2024-01-01T00:00:00Z, a 10-bit worker id and a 12-bit sequence.
//
// Every running instance needs its own worker id. It is either fixed by the
// operator (RAGENT_WORKER_ID, e.g. a StatefulSet ordinal; see New), so that
// startup does not depend on Redis, or leased from Redis and renewed (see
// Lease). Two instances sharing a worker id is the one way Snowflake IDs
// collide, and Redis can cause it in two different ways, which the lease
// treats by two different rules:
//
//   - An outage: Redis does not answer. Nobody can take our worker id while
//     the key is still there, so the lease is long (5 minutes) and an
//     instance goes on issuing IDs while it is valid by its own clock; a
//     Redis outage of minutes does not stop it.
//   - A failover: Redis answers, but a promoted replica may lack our key
//     (asynchronous replication lost the write), and another instance may
//     take our id on the new primary. The lease is therefore checked often
//     (every second): a renewal that finds the key gone or holding another
//     token stops the IDs at once, and a newly taken worker id issues no ID
//     before a hold of three renewal periods, by when every earlier holder
//     that can reach Redis has run a renewal, seen the new token and
//     stopped. An answer from Redis is evidence; only silence is trusted to
//     the clock.
//
// The residue of the two rules is a double fault: a failover that lost our
// key while we cannot reach the new primary for longer than the hold. A
// generator whose lease ran out or was lost stops issuing IDs (ErrNoWorker)
// until it holds a confirmed worker id again.
//
// The IDs of one generator are strictly increasing. A clock that steps back
// by at most MaxClockBackwards is waited out; a larger step makes Next fail
// with ErrClockBackwards until the clock has caught up, never a duplicate.
package idgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Bit layout of an ID, from the most significant bit: sign (always 0),
// milliseconds since Epoch, worker id, sequence.
const (
	timeBits   = 41
	workerBits = 10
	seqBits    = 12

	// MaxWorkerID is the largest worker id; valid ids are 0..MaxWorkerID.
	MaxWorkerID = 1<<workerBits - 1
	maxSeq      = 1<<seqBits - 1
	maxMillis   = 1<<timeBits - 1

	// MaxClockBackwards is the largest backwards clock step Next waits out.
	MaxClockBackwards = 5 * time.Millisecond
)

// Epoch is the zero of the ID's time field.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	// ErrClockBackwards means the clock stepped back further than
	// MaxClockBackwards; IDs resume once it has caught up.
	ErrClockBackwards = errors.New("idgen: clock moved backwards")
	// ErrNoWorker means no worker id is held: none was free when leasing,
	// or the lease was lost and not re-acquired within the lease wait.
	ErrNoWorker = errors.New("idgen: no worker id held")
	// ErrClosed is returned by Next after Close.
	ErrClosed = errors.New("idgen: generator closed")
)

// Generator issues unique IDs. It is safe for concurrent use.
type Generator struct {
	now       func() time.Time
	sleep     func(time.Duration)
	leaseWait time.Duration
	lease     *workerLease // nil for a fixed worker id

	mu sync.Mutex
	// worker is -1 while no worker id is held.
	worker int64
	// validUntil is when the lease runs out by our own clock; zero for a
	// fixed worker id, which never does.
	validUntil time.Time
	// confirmBy is when a newly leased worker id, still in its hold, is
	// expected to be confirmed; Next waits for it that long.
	confirmBy time.Time
	// changed is closed (and replaced) whenever the lease is acquired or
	// extended, and on Close, to wake callers of Next waiting for a lease.
	changed chan struct{}
	lastMs  int64
	seq     int64
	// advance forces the next ID into a later millisecond than the last
	// one, so IDs keep increasing across a change of worker id.
	advance bool
	closed  bool
}

// Config tunes a Generator; the zero Config takes the defaults.
type Config struct {
	// LeaseTTL is the worker-id lease TTL (default 5 min): how long an
	// instance keeps issuing IDs after Redis stops answering, less a tenth
	// of it. That tenth is the clock margin: the holder stops that much
	// before Redis frees the id, and instance clocks are assumed to agree
	// within it.
	LeaseTTL time.Duration
	// LeaseRenew is the renewal period (default 1 s, at most a third of
	// LeaseTTL); it must stay below LeaseTTL less the clock margin. It is
	// also how fast a holder notices that a failover lost its lease, and a
	// new lease is held three periods before it issues IDs, so every
	// instance of a deployment must use the same period.
	LeaseRenew time.Duration
	// LeaseWait is how long Next waits for a lost lease to be re-acquired
	// before it fails with ErrNoWorker (default 1 s).
	LeaseWait time.Duration
	Logger    *slog.Logger     // lease events; nil discards
	Now       func() time.Time // nil is time.Now
}

func (c Config) withDefaults() Config {
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 5*time.Minute)
	c.LeaseRenew = cmp.Or(c.LeaseRenew, min(time.Second, c.LeaseTTL/3))
	c.LeaseWait = cmp.Or(c.LeaseWait, time.Second)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// New returns a generator with a fixed worker id, which needs no Redis. It
// panics if worker is outside 0..MaxWorkerID; configuration is validated
// before this is called.
func New(worker int64, cfg Config) *Generator {
	if worker < 0 || worker > MaxWorkerID {
		panic(fmt.Sprintf("idgen: worker id %d outside 0..%d", worker, MaxWorkerID))
	}
	g := newGenerator(cfg.withDefaults())
	g.worker = worker
	return g
}

func newGenerator(c Config) *Generator {
	return &Generator{
		now:       c.Now,
		sleep:     time.Sleep,
		leaseWait: c.LeaseWait,
		worker:    -1,
		changed:   make(chan struct{}),
		lastMs:    -1,
	}
}

// WorkerID returns the worker id currently held, or -1 while none is.
func (g *Generator) WorkerID() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.worker
}

// Next returns a new ID. While the lease is lost it waits up to the lease
// wait for a worker id before failing with ErrNoWorker, and while a new
// worker id is in its hold, for the hold's end as well; it also waits out
// small backwards clock steps and sequence exhaustion within a millisecond.
func (g *Generator) Next() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var timeout <-chan time.Time
	for {
		if g.closed {
			return 0, ErrClosed
		}
		now := g.now()
		if g.worker < 0 || (!g.validUntil.IsZero() && !now.Before(g.validUntil)) {
			if timeout == nil {
				t := time.NewTimer(g.leaseWait + max(g.confirmBy.Sub(now), 0))
				defer t.Stop()
				timeout = t.C
			}
			changed := g.changed
			g.mu.Unlock()
			select {
			case <-changed:
				g.mu.Lock()
				continue
			case <-timeout:
				g.mu.Lock()
				return 0, ErrNoWorker
			}
		}

		ms := now.Sub(Epoch).Milliseconds()
		switch {
		case ms < 0 || ms > maxMillis:
			return 0, fmt.Errorf("idgen: clock %s outside the ID time range", now.UTC().Format(time.RFC3339))
		case ms < g.lastMs:
			back := time.Duration(g.lastMs-ms) * time.Millisecond
			if back > MaxClockBackwards {
				return 0, fmt.Errorf("%w by %s", ErrClockBackwards, back)
			}
			g.sleep(back)
			continue
		case ms == g.lastMs:
			if g.advance || g.seq == maxSeq {
				g.sleep(Epoch.Add(time.Duration(ms+1) * time.Millisecond).Sub(now))
				continue
			}
			g.seq++
		default:
			g.lastMs, g.seq, g.advance = ms, 0, false
		}
		return ms<<(workerBits+seqBits) | g.worker<<seqBits | g.seq, nil
	}
}

// Close stops renewing the lease and releases the worker id; afterwards
// Next fails with ErrClosed. It is a no-op for a fixed worker id.
func (g *Generator) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	close(g.changed)
	g.mu.Unlock()
	if g.lease == nil {
		return nil
	}
	// Stop the renewal loop first so it cannot acquire a worker id behind
	// our back; after that the worker field is ours alone.
	g.lease.renewer.Stop()
	g.mu.Lock()
	worker := g.worker
	g.worker = -1
	g.mu.Unlock()
	if worker < 0 {
		worker = g.lease.pending
	}
	if worker < 0 {
		return nil
	}
	return g.lease.release(ctx, worker)
}

// Decompose splits an ID into its time, worker id and sequence.
func Decompose(id int64) (t time.Time, worker, seq int64) {
	ms := id >> (workerBits + seqBits)
	worker = id >> seqBits & MaxWorkerID
	seq = id & maxSeq
	return Epoch.Add(time.Duration(ms) * time.Millisecond), worker, seq
}
