package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/internal/testenv"
)

// failoverPair is a primary and its replica of the test's own, behind a
// proxy the limiters connect to. lose makes the replica miss every write
// from then on (its link to the primary is cut, as by a slow network);
// promote then fails over to it: the replica becomes a primary (a new
// replication id), the proxy moves there and the primary is killed. Writes
// made between lose and promote are lost, as Redis' asynchronous
// replication allows.
type failoverPair struct {
	primary, replica *testenv.RedisProc
	proxy            *testenv.Proxy
	rdb              *redis.Client
}

func newFailoverPair(t *testing.T) *failoverPair {
	t.Helper()
	if top := testenv.RedisTopology(); top != redisconn.Single {
		// The pair is the test's own: one pass is enough.
		t.Skipf("the failover pair is private; RAGENT_TEST_REDIS_TOPOLOGY=%s runs it in the single pass", top)
	}
	primary, replica := testenv.StartPrimaryReplica(t)
	f := &failoverPair{primary: primary, replica: replica, proxy: testenv.NewProxy(t, primary.Addr)}
	f.rdb = redis.NewClient(&redis.Options{Addr: f.proxy.Addr(), DialTimeout: time.Second})
	t.Cleanup(func() { f.rdb.Close() })
	return f
}

// synced waits until the replica holds key.
func (f *failoverPair) synced(t *testing.T, key string) {
	t.Helper()
	rc := f.replica.Client()
	defer rc.Close()
	testenv.Eventually(t, 10*time.Second, key+" on the replica", func() bool {
		return rc.Exists(context.Background(), key).Val() == 1
	})
}

func (f *failoverPair) lose(t *testing.T) {
	t.Helper()
	rc := f.replica.Client()
	defer rc.Close()
	// A primary nobody runs: the replica keeps its data and waits.
	if err := rc.Do(t.Context(), "REPLICAOF", "127.0.0.1", fmt.Sprint(testenv.FreePort(t))).Err(); err != nil {
		t.Fatal(err)
	}
}

func (f *failoverPair) promote(t *testing.T) {
	t.Helper()
	rc := f.replica.Client()
	defer rc.Close()
	if err := rc.Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	f.proxy.Retarget(f.replica.Addr)
	f.primary.Kill()
}

// fenceLease renews every 400 ms, so the fence holds grants 1.4 s after a
// failover.
const fenceLease = 1200 * time.Millisecond

// TestFailoverFenceKeepsTheCap: permits granted on the primary and lost by
// the replica that replaces it are not granted again. The holder, still
// running, re-asserts them while the fence holds new grants; a second
// instance's request waits meanwhile instead of running a third call with a
// cap of 2.
func TestFailoverFenceKeepsTheCap(t *testing.T) {
	t.Parallel()
	for _, empty := range []bool{false, true} {
		name := "promoted replica"
		if empty {
			name = "restarted empty"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFailoverPair(t)
			cfg := Config{MaxConcurrent: 2, MaxWait: 5 * time.Second, Lease: fenceLease,
				PollInterval: 20 * time.Millisecond}
			l1 := startLimiter(t, f.rdb, "", "chat", cfg)
			l2 := startLimiter(t, f.rdb, "", "chat", cfg)
			// Both instances have talked to the limiter, and the fence key
			// (the primary's replication id) reached the replica.
			mustAcquire(t, l1, "warm1", "w").Release()
			start := time.Now()
			mustAcquire(t, l2, "warm2", "w").Release()
			if d := time.Since(start); d > l1.fence.hold {
				t.Errorf("a grant with no failover took %v: the fence held it", d)
			}
			f.synced(t, l1.keys.fence)

			f.lose(t)
			a, b := mustAcquire(t, l1, "a", "u"), mustAcquire(t, l1, "b", "v")
			if empty {
				// The primary restarts with no data: its replica is emptied
				// as well before taking over.
				rc := f.replica.Client()
				rc.Do(t.Context(), "REPLICAOF", "NO", "ONE")
				rc.FlushAll(t.Context())
				rc.Close()
			}
			f.promote(t)

			// Both permits run on; a new request must wait for one of them.
			short, cancel := context.WithTimeout(t.Context(), 3*l1.fence.hold)
			defer cancel()
			if p, err := l2.Acquire(short, "c", "x", nil); err == nil {
				p.Release()
				t.Fatal("a third permit with a cap of 2: the failover lost a and b and granted their slots again")
			} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
				t.Fatalf("acquire during the failover: %v", err)
			}
			rc := f.replica.Client()
			defer rc.Close()
			if got := rc.ZRange(t.Context(), l1.keys.permits, 0, -1).Val(); len(got) != 2 {
				t.Errorf("permits on the new primary %v, want a and b re-asserted", got)
			}
			a.Release()
			mustAcquire(t, l2, "d", "x").Release()
			b.Release()
			assertDrained(t, rc, l1.keys)
		})
	}
}

// TestFailoverFenceKeepsTheUploadCap is the same for the upload semaphore.
func TestFailoverFenceKeepsTheUploadCap(t *testing.T) {
	t.Parallel()
	f := newFailoverPair(t)
	cfg := Config{MaxConcurrent: 1, MaxWait: 3 * fenceLease, Lease: fenceLease,
		PollInterval: 20 * time.Millisecond, Logger: testLogger(t)}
	s1 := NewSemaphore(f.rdb, "", "upload", cfg)
	s2 := NewSemaphore(f.rdb, "", "upload", cfg)
	for _, s := range []*Semaphore{s1, s2} {
		p, err := s.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	f.synced(t, s1.keys.fence)

	f.lose(t)
	held, err := s1.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f.promote(t)
	if p, err := s2.Acquire(t.Context()); err == nil {
		p.Release()
		t.Fatal("a second upload with a cap of 1: the failover lost the permit and granted it again")
	} else if !errors.Is(err, ErrTimeout) {
		t.Fatalf("acquire during the failover: %v", err)
	}
	held.Release()
	p, err := s2.Acquire(t.Context())
	if err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
	p.Release()
}

// With the local policy, the Redis permits an instance holds when Redis
// goes away count towards its local share: they run on. Once Redis answers
// again, the local permits still held are created there, so new grants on
// every instance count them.
func TestLocalShareCountsRedisPermitsInFlight(t *testing.T) {
	t.Parallel()
	const n = 4
	cfg := localPolicy(n, 500*time.Millisecond, 600*time.Millisecond)
	cfg.PollInterval = 20 * time.Millisecond
	clients, limiters := localInstances(t, 3, cfg)
	// Each instance holds its share from Redis: all N are in flight.
	held := holdShares(t, limiters)
	cutAll(t, clients)
	for i, l := range limiters {
		if tryGrants(t, l, 1, fmt.Sprint("local", i), "x") > 0 {
			t.Errorf("instance %d granted a local permit with its whole share held from Redis", i)
		}
	}
	// One Redis permit ends during the outage: its instance may grant one
	// local permit in its place, and only one.
	held[0].Release()
	local, err := limiters[0].Acquire(t.Context(), "local-after", "x", nil)
	if err != nil || !local.Local() {
		t.Fatalf("local acquire after a release: %v", err)
	}
	if tryGrants(t, limiters[0], 1, "local-over", "x") > 0 {
		t.Error("a second local permit")
	}

	for _, c := range clients {
		c.restore()
	}
	admin := testenv.Redis(t)
	testenv.Eventually(t, 10*time.Second, "the local permit counted in Redis", func() bool {
		return admin.ZScore(context.Background(), limiters[0].keys.permits, "local-after").Err() == nil
	})
	local.Release()
	for _, p := range held[1:] {
		p.Release()
	}
	// held[0]'s release failed during the outage: its permit ends with its
	// lease, dropped by the next grant.
	testenv.Eventually(t, 10*time.Second, "the permit released during the outage expired", func() bool {
		if p, err := limiters[1].Acquire(t.Context(), "sweep", "y", nil); err == nil {
			p.Release()
		}
		return admin.ZCard(context.Background(), limiters[0].keys.permits).Val() == 0
	})
	assertDrained(t, admin, limiters[0].keys)
}
