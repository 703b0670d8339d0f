package ratelimit

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// With Redis wholly away, instances on the local policy together grant at
// most MaxConcurrent permits: each takes its share from the number of live
// instances it last saw (4 over 3 instances: 2, 1 and 1), not N each, in
// place of the Redis permits it ran when Redis went.
func TestLocalPolicySharesTheCap(t *testing.T) {
	t.Parallel()
	const n = 4
	cfg := localPolicy(n, time.Second, 600*time.Millisecond)
	clients, limiters := localInstances(t, 3, cfg)
	shares := func() (sum int64, each []int64) {
		for _, l := range limiters {
			s := l.local.share.Load()
			sum += s
			each = append(each, s)
		}
		return sum, each
	}

	// Each instance runs its share from Redis when Redis goes; those end
	// during the outage, and local permits take their places.
	fromRedis := holdShares(t, limiters)
	cutAll(t, clients)
	for _, p := range fromRedis {
		p.Release()
	}
	var granted []*Permit
	for i, l := range limiters {
		share := int(l.local.share.Load())
		// Each instance grants its share (an acquire that timed out while
		// still trying Redis on a loaded machine is retried)...
		for j, timeouts := 0, 0; j < share && timeouts < 5; {
			p, err := l.Acquire(t.Context(), fmt.Sprintf("r%d-%d", i, j), "u", nil)
			switch {
			case errors.Is(err, ErrTimeout):
				timeouts++
				continue
			case err != nil:
				t.Fatalf("instance %d: %v", i, err)
			case !p.Local():
				t.Fatalf("instance %d: a permit from Redis during the outage", i)
			}
			granted = append(granted, p)
			j++
		}
		// ...and no more.
		if tryGrants(t, l, 1, fmt.Sprintf("r%d-over", i), "u") > 0 {
			t.Errorf("instance %d granted beyond its share of %d", i, share)
		}
	}
	if _, each := shares(); len(granted) != n {
		t.Errorf("%d local permits granted on 3 instances (shares %v), want %d in all", len(granted), each, n)
	}
	for _, p := range granted {
		p.Release()
	}
}

// An instance that held more than its share when Redis went away keeps its
// holders running; the others, whose snapshots of it would be stale, grant
// no more than they held themselves (here nothing), so the instances
// together still run at most MaxConcurrent (counting the shares alone,
// three instances with N = 4 ran 7: the 4 of the busy instance and the
// shares of the others). The busy instance replaces its holders only once
// it is under its share.
func TestLocalPolicyCountsAnotherInstancesExcess(t *testing.T) {
	t.Parallel()
	const n = 4
	cfg := localPolicy(n, time.Second, 3*time.Second)
	clients, limiters := localInstances(t, 3, cfg)
	busy := limiters[0]
	// The busy instance takes every permit from the shared queue.
	var held []*Permit
	for i := range n {
		held = append(held, mustAcquire(t, busy, fmt.Sprintf("busy%d", i), "u"))
	}
	cutAll(t, clients)
	// The others grant nothing while the busy instance's holders run on,
	// whatever their shares (three tries each: the first may time out still trying Redis on a
	// loaded machine; the next go to the local semaphore at once)...
	granted := 0
	for i, l := range limiters[1:] {
		granted += tryGrants(t, l, 3, fmt.Sprintf("r%d-", i), "v")
	}
	if granted > 0 {
		t.Errorf("%d local permits beside the busy instance's %d: %d in flight with a cap of %d", granted, n, n+granted, n)
	}
	// ...and the busy instance none until it is back under its share.
	if tryGrants(t, busy, 1, "busy-more", "u") > 0 {
		t.Errorf("the busy instance granted a %dth permit during the outage", n+1)
	}
	for _, p := range held[:n-int(busy.local.share.Load())+1] {
		p.Release()
	}
	p, err := busy.Acquire(t.Context(), "busy-again", "u", nil)
	if err != nil {
		t.Fatalf("the busy instance, under its share again: %v", err)
	}
	p.Release()
	for _, p := range held {
		p.Release()
	}
}

// An instance's share comes from the live instances it last saw, and an
// instance that started first saw itself alone: were the newcomers to take
// permits from Redis before it has seen them, an outage would find it
// believing itself alone (a share of all N) beside their Redis permits.
// The failover test (RELIABILITY.md) killed Redis within a heartbeat of
// the last start and saw 5 calls with N = 4 (the first instance's bound
// was 4 beside the others' 2). So a newcomer that finds other instances
// takes no permit from Redis until they have all seen it.
func TestLocalPolicyNewcomerWaitsUntilSeen(t *testing.T) {
	t.Parallel()
	const n = 4
	_, prefix := cleanRedis(t)
	// A lease of 30 s: the instances beat every 2 s (10 s before the fix).
	cfg := localPolicy(n, 6*time.Second, 30*time.Second)
	first := newSwitchableClient(t)
	oldCfg := cfg
	oldCfg.MaxWait = time.Second // its acquires below are expected to time out
	old := startLimiter(t, first, prefix, "chat", oldCfg)
	testenv.Eventually(t, 10*time.Second, "the first instance to see itself alone", func() bool {
		return old.local.live.Load() == 1
	})
	clients := []*switchableClient{first}
	var held []*Permit
	for i := range 2 {
		c := newSwitchableClient(t)
		clients = append(clients, c)
		l := startLimiter(t, c, prefix, "chat", cfg)
		for j := range n / 2 {
			p := mustAcquire(t, l, fmt.Sprintf("new%d-%d", i, j), "u")
			defer p.Release()
			held = append(held, p)
		}
	}
	cutAll(t, clients)
	// The newcomers' n permits run on; the first instance must add none.
	granted := tryGrants(t, old, 2, "old", "v")
	if granted > 0 {
		t.Errorf("the first instance (seeing %d live) granted %d beside the newcomers' %d: %d in flight, cap %d",
			old.local.live.Load(), granted, len(held), granted+len(held), n)
	}
}

// Redis back without its data (restarted empty after an outage) has lost
// the set of live instances; the instances come back into it one beat at a
// time, and the first to beat sees itself alone. It must not take that
// for a share of all N: at the next failure it would grant N local permits
// beside the others' (the failover test, RELIABILITY.md, saw 5 model calls
// with N = 4 just after Redis came back empty).
func TestLocalPolicyShareSurvivesRedisLosingItsData(t *testing.T) {
	t.Parallel()
	const n = 4
	cfg := localPolicy(n, time.Second, 30*time.Second)
	clients, limiters := localInstances(t, 3, cfg)
	// Two instances run a permit each from Redis.
	for i, l := range limiters[1:] {
		defer mustAcquire(t, l, fmt.Sprintf("held%d", i), "u").Release()
	}
	// Redis loses everything; the first instance beats before the others.
	k := limiters[0].keys
	if err := testenv.Redis(t).Del(t.Context(), k.queue, k.seq, k.permits, k.users, k.owners, k.held, k.deadlines, k.instances, k.fence).Err(); err != nil {
		t.Fatal(err)
	}
	first := limiters[0]
	if err := first.beat(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	// And Redis goes again: the first instance falls back to its share.
	clients[0].cut(t)
	granted := tryGrants(t, first, n, "r", "v")
	if granted+2 > n {
		t.Errorf("the first instance (share %d of %d live) granted %d beside the others' 2: %d in flight, cap %d",
			first.local.share.Load(), first.local.live.Load(), granted, granted+2, n)
	}
}

// After a failure the limiter skips Redis for a second (downUntil), so an
// outage does not make every Acquire wait for dial retries. Once a script
// reaches Redis again, the next Acquire must ask Redis: a local permit
// granted beside Redis' grants just after an outage is one more than N.
func TestLocalPolicyAsksRedisOnceItAnswers(t *testing.T) {
	t.Parallel()
	_, prefix := cleanRedis(t)
	cfg := localPolicy(2, 2*time.Second, 30*time.Second)
	c := newSwitchableClient(t)
	l := startLimiter(t, c, prefix, "chat", cfg)
	testenv.Eventually(t, 10*time.Second, "the instance to join", func() bool { return allSeen([]*Limiter{l}) })
	c.cut(t)
	p := mustAcquire(t, l, "during", "u")
	if !p.Local() {
		t.Fatal("a permit from Redis during the outage")
	}
	p.Release()
	c.restore()
	if err := l.beat(t.Context(), false); err != nil { // Redis answers again
		t.Fatal(err)
	}
	p = mustAcquire(t, l, "after", "u")
	defer p.Release()
	if p.Local() {
		t.Error("a local permit although Redis had answered since the failure")
	}
}
