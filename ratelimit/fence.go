package ratelimit

import (
	"sync/atomic"
	"time"
)

// The failover fence (lua/fence.lua). Redis replicates asynchronously, so a
// replica promoted after its primary died may lack the permits granted just
// before, while their holders still run: granting those slots again would
// put more than MaxConcurrent to work. Every grant script therefore reads
// the server's replication id, which a promotion (or a restart) changes;
// on a change it holds new grants for one renewal period plus a second, in
// which every running holder renews and re-creates a permit the failover
// lost. The cost is one INFO replication and one HMGET per grant script
// (BENCHMARKS.md), and after a failover a pause of a few seconds in grants.

// maxRenewEvery bounds the renewal period of a permit, which bounds the
// fence's hold after a failover (renewEvery + fenceSlack).
const (
	maxRenewEvery = 2 * time.Second
	fenceSlack    = time.Second
)

// renewEvery is how often a permit of lease d renews: a third of the lease
// (two more chances before it ends), at most maxRenewEvery.
func renewEvery(d time.Duration) time.Duration {
	return min(d/3, maxRenewEvery)
}

// fence is one limiter's (or semaphore's) side of the fence: its key, the
// hold, and whether this instance has talked to it already.
type fence struct {
	key  string
	hold time.Duration
	// seen is set after the first script reply: from then on, a fence key
	// missing in Redis means Redis lost its data, not that the limiter is
	// new, and grants are held too.
	seen atomic.Bool
}

func newFence(k keys, lease time.Duration) *fence {
	return &fence{key: k.fence, hold: renewEvery(lease) + fenceSlack}
}

// withKey appends the fence key to a script's keys (it goes last).
func (f *fence) withKey(keys ...string) []string { return append(keys, f.key) }

// withArgs appends the fence's arguments to a script's (they go last).
func (f *fence) withArgs(args ...any) []any {
	seen := "0"
	if f.seen.Load() {
		seen = "1"
	}
	return append(args, seen, f.hold.Milliseconds())
}

// saw records a script reply.
func (f *fence) saw() { f.seen.Store(true) }
