package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestFairShareBetweenUsers runs three instances on one Redis. A heavy user
// holds every permit (two of them through an instance that then dies
// without releasing) and queues more; a light user arriving later is granted
// before the heavy user's queued requests, nobody holds more than N permits,
// and the dead instance's permits and their users' counts come back.
func TestFairShareBetweenUsers(t *testing.T) {
	t.Parallel()
	const n = 4
	rdb, prefix := cleanRedis(t)
	cfg := Config{MaxConcurrent: n, MaxWait: 20 * time.Second, Lease: time.Second,
		PollInterval: 50 * time.Millisecond}
	var limiters []*Limiter
	for range 3 {
		limiters = append(limiters, startLimiter(t, testenv.Redis(t), prefix, "chat", cfg))
	}
	// The instance that dies: its Redis connections are cut, so it neither
	// renews nor releases, as if it had been killed.
	doomedClient := newSwitchableClient(t)
	doomed := startLimiter(t, doomedClient, prefix, "chat", cfg)
	ctx := t.Context()

	var holders, maxHolders atomic.Int64
	hold := func() {
		h := holders.Add(1)
		for {
			m := maxHolders.Load()
			if h <= m || maxHolders.CompareAndSwap(m, h) {
				return
			}
		}
	}
	// The heavy user takes every permit: two on live instances, two on the
	// instance that will die.
	var heavyHeld []*Permit
	for i := range 2 {
		p, err := limiters[i].Acquire(ctx, fmt.Sprintf("heavy-held-%d", i), "heavy", nil)
		if err != nil {
			t.Fatal(err)
		}
		hold()
		heavyHeld = append(heavyHeld, p)
	}
	for i := range 2 {
		if _, err := doomed.Acquire(ctx, fmt.Sprintf("heavy-doomed-%d", i), "heavy", nil); err != nil {
			t.Fatal(err)
		}
		hold()
	}

	var (
		mu      sync.Mutex
		order   []string
		wg      sync.WaitGroup
		permits = map[string]*Permit{}
	)
	granted := make(chan string, 8)
	enqueue := func(l *Limiter, id, user string) int {
		queued := make(chan int, 1)
		var once sync.Once
		wg.Go(func() {
			p, err := l.Acquire(ctx, id, user, func(pos, _ int) { once.Do(func() { queued <- pos }) })
			once.Do(func() { queued <- 0 })
			if err != nil {
				t.Errorf("%s: %v", id, err)
				granted <- id
				return
			}
			hold()
			mu.Lock()
			order = append(order, id)
			permits[id] = p
			mu.Unlock()
			granted <- id
		})
		return <-queued // wait for this request's queue event before the next arrives
	}
	// The heavy user's streams beyond the permits wait, in arrival order.
	for i := range 3 {
		if pos := enqueue(limiters[i%3], fmt.Sprintf("heavy-queued-%d", i), "heavy"); pos != i+1 {
			t.Fatalf("heavy-queued-%d: first position %d, want %d", i, pos, i+1)
		}
	}
	// The light user arrives last, on another instance, and is placed first.
	if pos := enqueue(limiters[2], "light", "light"); pos != 1 {
		t.Fatalf("light user's first position %d, want 1 (ahead of the heavy user's queued requests)", pos)
	}

	// The doomed instance dies holding two permits; after their lease they
	// expire and the first two in line get them.
	doomedClient.cut(t)
	holders.Add(-2)
	for range 2 {
		select {
		case <-granted:
		case <-time.After(10 * time.Second):
			t.Fatal("the dead instance's permits did not come back")
		}
	}
	// Then the heavy user's live streams end one by one.
	for _, p := range heavyHeld {
		holders.Add(-1)
		p.Release()
		<-granted
	}
	// Every queued request now holds a permit; give them back.
	mu.Lock()
	for _, id := range slices.Clone(order) {
		holders.Add(-1)
		permits[id].Release()
		delete(permits, id)
	}
	mu.Unlock()
	wg.Wait()
	mu.Lock()
	for _, p := range permits {
		holders.Add(-1)
		p.Release()
	}
	mu.Unlock()

	// The dead instance's two permits expire together and go to the first
	// two in line, light and heavy-queued-0, whichever claims first; the
	// rest keep the queue's order.
	first := slices.Clone(order[:min(2, len(order))])
	slices.Sort(first)
	if want := []string{"heavy-queued-0", "light"}; !slices.Equal(first, want) ||
		!slices.Equal(order[len(first):], []string{"heavy-queued-1", "heavy-queued-2"}) {
		t.Errorf("grant order %v, want light and heavy-queued-0 (either first), heavy-queued-1, heavy-queued-2", order)
	}
	if m := maxHolders.Load(); m > n {
		t.Errorf("%d permits held at once, limit %d", m, n)
	}
	// Nothing is left of the dead instance's permits, nor of the users'
	// counts that order the queue.
	assertDrained(t, rdb, limiters[0].keys)
}

// TestFairShareLevels checks the order the queue gives: a user's k-th
// request in flight goes after every other user's requests with fewer in
// flight, and requests of the same level keep their arrival order.
func TestFairShareLevels(t *testing.T) {
	t.Parallel()
	l, rdb := cleanLimiter(t, "chat", Config{MaxConcurrent: 1, MaxWait: 20 * time.Second, Lease: 5 * time.Second,
		PollInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	blocker := mustAcquire(t, l, "blocker", "a") // a holds the only permit
	// Arrivals: a (level 1), a (2), b (0), b (1), c (0), a (3) — served as
	// b1 c1 (level 0), a1 b2 (level 1), a2, a3.
	arrivals := []struct{ id, user string }{
		{"a1", "a"}, {"a2", "a"}, {"b1", "b"}, {"b2", "b"}, {"c1", "c"}, {"a3", "a"},
	}
	var queued []<-chan acquired
	for _, a := range arrivals {
		queued = append(queued, acquireQueued(ctx, l, a.id, a.user))
	}
	if got, want := queueOrder(t, rdb, l), []string{"b1", "c1", "a1", "b2", "a2", "a3"}; !slices.Equal(got, want) {
		t.Errorf("queue order %v, want %v", got, want)
	}
	cancel()
	for i, q := range queued {
		if r := <-q; !errors.Is(r.err, context.Canceled) {
			t.Errorf("%s: %v", arrivals[i].id, r.err)
		}
	}
	blocker.Release()
	assertDrained(t, rdb, l.keys)
}

// TestFairShareLevelAfterADip checks that a user's new request does not go
// ahead of its own queued requests, nor of other users' requests queued at
// their level, when the user's count of requests in flight dipped for a
// moment: two of its streams ended just before it asked again (the load of
// BenchmarkBudgets, where such a request used to jump every request of the
// level above).
func TestFairShareLevelAfterADip(t *testing.T) {
	t.Parallel()
	l, rdb := cleanLimiter(t, "chat", Config{MaxConcurrent: 3, MaxWait: 20 * time.Second, Lease: 5 * time.Second,
		PollInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	blocker := mustAcquire(t, l, "blocker", "x")
	h1, h2 := mustAcquire(t, l, "h1", "a"), mustAcquire(t, l, "h2", "a")
	// a holds two permits, so a1 is at level 2; b's are at 0, 1 and 2.
	a1 := acquireQueued(ctx, l, "a1", "a")
	var b []<-chan acquired
	for _, id := range []string{"b1", "b2", "b3"} {
		b = append(b, acquireQueued(ctx, l, id, "b"))
	}
	if got, want := queueOrder(t, rdb, l), []string{"b1", "b2", "a1", "b3"}; !slices.Equal(got, want) {
		t.Fatalf("queue order %v, want %v", got, want)
	}
	// Both of a's streams end; b1 and b2 take the slots.
	var bHeld []*Permit
	for i, p := range []*Permit{h1, h2} {
		p.Release()
		r := <-b[i]
		if r.err != nil {
			t.Fatal(r.err)
		}
		bHeld = append(bHeld, r.p)
	}
	// a asks again with one request in flight (a1): a2 takes a1's level,
	// behind b3, not level 1 ahead of both.
	a2 := acquireQueued(ctx, l, "a2", "a")
	if got, want := queueOrder(t, rdb, l), []string{"a1", "b3", "a2"}; !slices.Equal(got, want) {
		t.Errorf("queue order after the dip %v, want %v", got, want)
	}
	cancel()
	for _, q := range []<-chan acquired{a1, b[2], a2} {
		if r := <-q; !errors.Is(r.err, context.Canceled) {
			t.Errorf("waiter: %v", r.err)
		}
	}
	for _, p := range append(bHeld, blocker) {
		p.Release()
	}
	assertDrained(t, rdb, l.keys)
}

// TestFairShareRunningCap checks MaxRunningPerUser across two instances: a
// user holding the cap does not get a freed permit while another user below
// it waits, even when its own request is ahead in the queue, and gets it as
// soon as nobody below the cap waits; a user alone still takes every permit.
func TestFairShareRunningCap(t *testing.T) {
	t.Parallel()
	rdb, prefix := cleanRedis(t)
	cfg := Config{MaxConcurrent: 4, MaxRunningPerUser: 2, MaxWait: 30 * time.Second, Lease: 5 * time.Second,
		PollInterval: 50 * time.Millisecond}
	l0 := startLimiter(t, rdb, prefix, "chat", cfg)
	l1 := startLimiter(t, testenv.Redis(t), prefix, "chat", cfg)
	ctx := t.Context()

	// Alone, a user takes all four permits: the cap applies only while
	// another user waits.
	for i := range 4 {
		mustAcquire(t, []*Limiter{l0, l1}[i%2], fmt.Sprintf("alone-%d", i), "alone").Release()
	}
	var alone []*Permit
	for i := range 4 {
		alone = append(alone, mustAcquire(t, []*Limiter{l0, l1}[i%2], fmt.Sprintf("alone-held-%d", i), "alone"))
	}
	for _, p := range alone {
		p.Release()
	}

	a1, a2 := mustAcquire(t, l0, "a1", "a"), mustAcquire(t, l1, "a2", "a")
	c1, c2 := mustAcquire(t, l1, "c1", "c"), mustAcquire(t, l0, "c2", "c")
	// a3 arrives with a's two permits as its level (2); b's third request
	// has the same level and comes later, so the queue puts a3 ahead of it.
	a3 := acquireQueued(ctx, l0, "a3", "a")
	b1 := acquireQueued(ctx, l1, "b1", "b")
	b2 := acquireQueued(ctx, l0, "b2", "b")
	b3 := acquireQueued(ctx, l1, "b3", "b")
	got, err := rdb.ZRange(ctx, l0.keys.queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"b1", "b2", "a3", "b3"}; !slices.Equal(got, want) {
		t.Fatalf("queue order %v, want %v", got, want)
	}
	granted := func(name string, ch <-chan acquired) *Permit {
		t.Helper()
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		return r.p
	}
	c1.Release()
	pb1 := granted("b1", b1)
	c2.Release()
	pb2 := granted("b2", b2)

	// b now holds one permit, a holds its cap: the permit b1 frees goes to
	// b3, behind a3 in the queue.
	pb1.Release()
	select {
	case r := <-a3:
		t.Fatalf("a3 (its user at the cap) took the freed permit while b3 waited: %v", r.err)
	case r := <-b3:
		if r.err != nil {
			t.Fatalf("b3: %v", r.err)
		}
		defer r.p.Release()
	}
	// With nobody below the cap waiting, a3 gets the next permit although
	// a holds two already.
	pb2.Release()
	granted("a3", a3).Release()
	a1.Release()
	a2.Release()
}
