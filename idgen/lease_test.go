package idgen

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// mustLease returns a leased generator once its worker id is confirmed (its
// hold is over).
func mustLease(t *testing.T, rdb redis.UniversalClient, prefix string, cfg Config) *Generator {
	t.Helper()
	g, err := Lease(t.Context(), rdb, prefix, cfg)
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	testenv.Eventually(t, 2*g.lease.hold+5*time.Second, "the worker id to be confirmed", func() bool {
		return g.WorkerID() >= 0
	})
	return g
}

// occupy leases every worker id but the given ones under a foreign token,
// as other instances would.
func occupy(t *testing.T, rdb redis.UniversalClient, prefix string, except ...int64) {
	t.Helper()
	skip := map[int64]bool{}
	for _, w := range except {
		skip[w] = true
	}
	l := &workerLease{prefix: prefix}
	var keys []string
	_, err := rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		for w := range int64(MaxWorkerID + 1) {
			if !skip[w] {
				keys = append(keys, l.key(w))
				p.Set(t.Context(), l.key(w), "someone-else", time.Minute)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("occupy: %v", err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), keys...) })
}

func TestLeasedGeneratorsGetDistinctWorkers(t *testing.T) {
	prefix := testenv.Prefix(t)
	seen := map[int64]bool{}
	for range 3 {
		g := mustLease(t, testenv.Redis(t), prefix, Config{})
		w := g.WorkerID()
		if w < 0 || w > MaxWorkerID || seen[w] {
			t.Fatalf("worker id %d (seen before: %v)", w, seen[w])
		}
		seen[w] = true
		if _, got, _ := Decompose(mustNext(t, g)); got != w {
			t.Fatalf("id carries worker %d, want %d", got, w)
		}
	}
}

func TestLeaseScansToTheLastFreeWorker(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	occupy(t, rdb, prefix, 777)

	g := mustLease(t, testenv.Redis(t), prefix, Config{})
	if g.WorkerID() != 777 {
		t.Fatalf("WorkerID = %d, want the only free id 777", g.WorkerID())
	}
	if _, err := Lease(t.Context(), testenv.Redis(t), prefix, Config{}); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("Lease with every id taken: %v, want ErrNoWorker", err)
	}
}

func TestMillionIDsUniqueAndIncreasing(t *testing.T) {
	g := mustLease(t, testenv.Redis(t), testenv.Prefix(t), Config{})
	const n = 1_000_000
	start := time.Now()
	prev := int64(-1)
	for i := range n {
		id, err := g.Next()
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		if id <= prev {
			t.Fatalf("id #%d = %d not above %d", i, id, prev)
		}
		prev = id
	}
	t.Logf("%d IDs in %s", n, time.Since(start))
}

func TestCloseReleasesLease(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	g, err := Lease(t.Context(), testenv.Redis(t), prefix, Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	key := g.lease.key(g.WorkerID())
	if err := g.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The key lingers for the clock margin only (a tenth of the TTL).
	if ttl := rdb.PTTL(t.Context(), key).Val(); ttl > 100*time.Millisecond {
		t.Fatalf("after Close the lease key lives %s more, want <= 100ms", ttl)
	}
	if _, err := g.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

func TestLostLeaseIsReacquired(t *testing.T) {
	tests := []struct {
		name string
		// lose makes the generator lose the lease on key.
		lose func(ctx context.Context, rdb redis.UniversalClient, key string) error
		// moves reports whether the generator must take another worker id;
		// otherwise it must take its own back (as after Redis lost its data).
		moves bool
	}{
		{"deleted", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			return rdb.Del(ctx, key).Err()
		}, false},
		{"taken by another instance", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			return rdb.Set(ctx, key, "someone-else", time.Minute).Err()
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := testenv.Redis(t)
			prefix := testenv.Prefix(t)
			g := mustLease(t, testenv.Redis(t), prefix, Config{LeaseTTL: 300 * time.Millisecond})
			old := g.WorkerID()
			key := g.lease.key(old)
			t.Cleanup(func() { rdb.Del(context.Background(), key) })

			ids := []int64{mustNext(t, g)}
			if err := tt.lose(t.Context(), rdb, key); err != nil {
				t.Fatal(err)
			}
			// Renewal runs every 100ms; within a second the generator must
			// hold a worker id again under its own token.
			testenv.Eventually(t, 2*time.Second, "the lease to be re-acquired", func() bool {
				w := g.WorkerID()
				if (w != old) == tt.moves && w >= 0 &&
					rdb.Get(t.Context(), g.lease.key(w)).Val() == g.lease.token &&
					rdb.PTTL(t.Context(), g.lease.key(w)).Val() > 0 {
					return true
				}
				ids = append(ids, mustNext(t, g))
				return false
			})
			for range 1000 {
				ids = append(ids, mustNext(t, g))
			}
			for i := 1; i < len(ids); i++ {
				if ids[i] <= ids[i-1] {
					t.Fatalf("id %d after %d", ids[i], ids[i-1])
				}
			}
			if _, w, _ := Decompose(ids[len(ids)-1]); w != g.WorkerID() {
				t.Fatalf("last id has worker %d, generator holds %d", w, g.WorkerID())
			}
		})
	}
}

// TestLeaseExpiresWhileRedisUnreachable cuts the generator off from Redis
// until its lease expires there and another instance takes the same worker
// id: the generator must stop issuing IDs before Redis frees the id, and
// come back with another worker id once Redis is reachable and one is free.
func TestLeaseExpiresWhileRedisUnreachable(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	cut, p := proxiedRedis(t)

	const ttl = 400 * time.Millisecond
	g := mustLease(t, cut, prefix, Config{LeaseTTL: ttl, LeaseWait: 20 * time.Millisecond})
	worker := g.WorkerID()
	key := g.lease.key(worker)
	occupy(t, rdb, prefix, worker)

	mine := map[int64]bool{}
	for range 100 {
		mine[mustNext(t, g)] = true
	}
	p.Down()
	expiresAt := time.Now().Add(rdb.PTTL(t.Context(), key).Val())

	// Issue IDs until the generator refuses; none may be stamped at or after
	// the moment Redis frees the worker id.
	for {
		id, err := g.Next()
		if errors.Is(err, ErrNoWorker) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if at, _, _ := Decompose(id); !at.Before(expiresAt.Truncate(time.Millisecond)) {
			t.Fatalf("id stamped %s, lease expires in Redis at %s", at, expiresAt)
		}
		mine[id] = true
		if time.Now().After(expiresAt.Add(time.Second)) {
			t.Fatal("generator kept issuing IDs after its lease expired")
		}
	}

	// Another instance takes the freed worker id, the only free one.
	testenv.Eventually(t, 2*time.Second, "the lease key to expire", func() bool {
		return rdb.Exists(t.Context(), key).Val() == 0
	})
	other := mustLease(t, testenv.Redis(t), prefix, Config{})
	if other.WorkerID() != worker {
		t.Fatalf("other instance got worker %d, want the freed %d", other.WorkerID(), worker)
	}
	theirs := map[int64]bool{}
	for range 1000 {
		theirs[mustNext(t, other)] = true
	}

	// Back online, the generator finds its lease gone and, once an id is
	// free, takes it.
	p.Up()
	if err := rdb.Del(t.Context(), g.lease.key((worker+1)%(MaxWorkerID+1))).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Second, "the generator to re-acquire a new worker id", func() bool {
		return g.WorkerID() >= 0 && g.WorkerID() != worker
	})
	for range 1000 {
		mine[mustNext(t, g)] = true
	}
	for id := range mine {
		if theirs[id] {
			t.Fatalf("duplicate id %d across instances", id)
		}
	}
}

// TestIDsOutlastARedisOutageWhileTheLeaseIsValid cuts Redis off and moves
// the generator's clock on instead of waiting: IDs keep coming for minutes,
// while the lease is valid by the generator's own clock, stop with
// ErrNoWorker before Redis would free the worker id, and resume on the same
// worker id once a renewal reaches Redis again.
func TestIDsOutlastARedisOutageWhileTheLeaseIsValid(t *testing.T) {
	prefix := testenv.Prefix(t)
	cut, p := proxiedRedis(t)

	clock := &fakeClock{t: time.Now()}
	g, err := Lease(t.Context(), cut, prefix, Config{Now: clock.now, LeaseWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	// The test renews by hand, on the fake clock: first the confirmation
	// at the end of the new worker id's hold.
	g.lease.renewer.Stop()
	worker := g.lease.pending
	if held, _ := g.renewOrAcquire(t.Context()); held || g.WorkerID() >= 0 {
		t.Fatal("worker id confirmed before its hold ended")
	}
	clock.step(g.lease.hold)
	if held, _ := g.renewOrAcquire(t.Context()); !held || g.WorkerID() != worker {
		t.Fatal("confirmation with Redis up failed")
	}
	renewed := clock.now()

	p.Down()
	valid := 5*time.Minute - 5*time.Minute/10 // the TTL less the clock margin
	prev := mustNext(t, g)
	for _, at := range []time.Duration{time.Second, 30 * time.Second, time.Minute, 4 * time.Minute, valid - time.Millisecond} {
		clock.t = renewed.Add(at)
		if held, _ := g.renewOrAcquire(t.Context()); held {
			t.Fatalf("renewal at +%s succeeded with Redis cut off", at)
		}
		id, err := g.Next()
		if err != nil {
			t.Fatalf("Next at +%s into the outage: %v", at, err)
		}
		if _, w, _ := Decompose(id); w != worker || id <= prev {
			t.Fatalf("id %d (worker %d) after %d, want increasing ids of worker %d", id, w, prev, worker)
		}
		prev = id
	}
	clock.t = renewed.Add(valid)
	if _, err := g.Next(); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("Next once the lease ran out by our clock: %v, want ErrNoWorker", err)
	}

	p.Up()
	if held, _ := g.renewOrAcquire(t.Context()); !held {
		t.Fatal("renewal after Redis came back failed")
	}
	if g.WorkerID() != worker {
		t.Fatalf("worker %d after the outage, want the still-leased %d", g.WorkerID(), worker)
	}
	if id := mustNext(t, g); id <= prev {
		t.Fatalf("id %d after %d", id, prev)
	}
}

// TestLeaseLostInAFailoverIsNeverShared loses a holder's lease key the way
// a promoted replica loses a write it never received (the key is deleted
// under the holder), and lets a second instance take the same worker id on
// the "new primary": the second instance may issue its first ID only once
// the first holder has noticed and stopped, so no ID is issued by both.
func TestLeaseLostInAFailoverIsNeverShared(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	cfg := Config{LeaseTTL: 3 * time.Second, LeaseWait: 10 * time.Second} // renewed every second
	a := mustLease(t, testenv.Redis(t), prefix, cfg)
	a.leaseWait = 10 * time.Millisecond // a's loop below must not block long once it lost the id
	worker := a.WorkerID()
	occupy(t, rdb, prefix, worker)

	// a issues IDs all along, recording the ones carrying the shared id.
	var (
		mu    sync.Mutex
		aIDs  []int64
		done  = make(chan struct{})
		ended = make(chan struct{})
	)
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			default:
			}
			id, err := a.Next()
			if err != nil {
				continue
			}
			if _, w, _ := Decompose(id); w == worker {
				mu.Lock()
				aIDs = append(aIDs, id)
				mu.Unlock()
			}
		}
	}()

	// If a's renewal runs between the loss and b's Lease, a simply takes
	// its own id back and b finds none free; lose it again then.
	var b *Generator
	for attempt := 0; b == nil; attempt++ {
		if err := rdb.Del(t.Context(), a.lease.key(worker)).Err(); err != nil {
			t.Fatal(err)
		}
		g, err := Lease(t.Context(), testenv.Redis(t), prefix, cfg)
		switch {
		case err == nil:
			b = g
			t.Cleanup(func() { _ = b.Close(context.Background()) })
		case !errors.Is(err, ErrNoWorker) || attempt == 10:
			t.Fatalf("Lease: %v", err)
		}
	}
	first := mustNext(t, b)
	if _, w, _ := Decompose(first); w != worker {
		t.Fatalf("b issues with worker %d, want the only free id %d", w, worker)
	}
	if w := a.WorkerID(); w == worker {
		t.Fatalf("b issues IDs with worker %d while a still holds it", worker)
	}
	bIDs := map[int64]bool{first: true}
	for range 10_000 {
		bIDs[mustNext(t, b)] = true
	}
	close(done)
	<-ended

	firstAt, _, _ := Decompose(first)
	for _, id := range aIDs {
		if bIDs[id] {
			t.Fatalf("id %d issued by both instances", id)
		}
		if at, _, _ := Decompose(id); !at.Before(firstAt) {
			t.Fatalf("a issued id %d at %s with worker %d, after b's first at %s", id, at, worker, firstAt)
		}
	}
	if len(aIDs) == 0 {
		t.Fatal("a issued no IDs with its worker id before losing it; the test proved nothing")
	}
}

func TestLeaseDefaultsAndRenewalBound(t *testing.T) {
	c := Config{}.withDefaults()
	if c.LeaseTTL < time.Minute || c.LeaseRenew > 20*time.Second {
		t.Fatalf("defaults: lease %s renewed every %s, want minutes renewed within 20 s", c.LeaseTTL, c.LeaseRenew)
	}
	if c := (Config{LeaseTTL: 3 * time.Second}).withDefaults(); c.LeaseRenew != time.Second {
		t.Fatalf("a 3 s lease is renewed every %s, want a third of it", c.LeaseRenew)
	}
	rdb := testenv.Redis(t)
	for _, renew := range []time.Duration{-time.Second, 9 * time.Second, time.Minute} {
		if _, err := Lease(t.Context(), rdb, testenv.Prefix(t), Config{LeaseTTL: 10 * time.Second, LeaseRenew: renew}); err == nil {
			t.Errorf("Lease renewing a 10 s lease every %s succeeded", renew)
		}
	}
}

// proxiedRedis returns a client of the test's Redis through a proxy the
// test can cut, failing fast (no retries, 100 ms to dial) while it is cut.
func proxiedRedis(t *testing.T) (*redis.Client, *testenv.Proxy) {
	opt, _ := redis.ParseURL(testenv.RedisURL(t))
	p := testenv.NewProxy(t, opt.Addr)
	opt.Addr = p.Addr()
	opt.DialTimeout = 100 * time.Millisecond
	opt.MaxRetries = -1
	cut := redis.NewClient(opt)
	t.Cleanup(func() { cut.Close() })
	return cut, p
}
