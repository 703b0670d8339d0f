package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestKeysShareHashTag(t *testing.T) {
	k := newKeys("", "chat")
	for _, key := range []string{k.queue, k.seq, k.permits, k.entry + "r1", k.notify, k.users, k.owners, k.held, k.deadlines} {
		if want := "ragent:{limiter:chat}:"; key[:len(want)] != want {
			t.Errorf("key %q does not start with %q", key, want)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Policy
		wantErr bool
	}{
		{"reject", PolicyReject, false},
		{"local", PolicyLocal, false},
		{"", PolicyReject, true},
		{"LOCAL", PolicyReject, true},
	} {
		got, err := ParsePolicy(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParsePolicy(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestUncontendedAcquireAndRelease(t *testing.T) {
	rdb, prefix := cleanRedis(t)
	reg := prometheus.NewRegistry()
	l := startLimiter(t, rdb, prefix, "chat", Config{MaxConcurrent: 2, Lease: 3 * time.Second, Registerer: reg})
	// A second limiter with the same name on the same registry shares its
	// collector instead of failing.
	if l2 := New(rdb, prefix, "chat", Config{Registerer: reg}); l2.m != l.m {
		t.Error("second limiter did not reuse the registered metrics")
	}

	ctx := t.Context()
	p, err := l.Acquire(ctx, "r1", "alice", func(int, int) { t.Error("uncontended acquire reported a position") })
	if err != nil {
		t.Fatal(err)
	}
	if p.Local() {
		t.Error("permit is local")
	}
	score, err := rdb.ZScore(ctx, l.keys.permits, "r1").Result()
	if err != nil {
		t.Fatalf("permit not in Redis: %v", err)
	}
	redisNow, _ := rdb.Time(ctx).Result()
	if lease := time.UnixMilli(int64(score)).Sub(redisNow); lease < 2*time.Second || lease > 3*time.Second {
		t.Errorf("lease expires in %v, want about 3s", lease)
	}
	st, err := l.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{PermitsInUse: 1}) {
		t.Errorf("stats = %+v", st)
	}
	p.Release()
	p.Release()
	assertDrained(t, rdb, l.keys)
	if got := metricValue(t, l.m.permitsInUse); got != 0 {
		t.Errorf("permits gauge = %v after release", got)
	}
	if n := metricValue(t, l.m.waitSeconds); n != 1 {
		t.Errorf("wait histogram count = %v", n)
	}
	if families, err := reg.Gather(); err != nil || len(families) != 7 {
		t.Errorf("gathered %d families, err %v", len(families), err)
	}
}

// TestSafety runs 3 instances × 100 concurrent acquirers against N=5: the
// number of holders, counted by the test, never exceeds N.
func TestSafety(t *testing.T) {
	t.Parallel()
	const (
		instances = 3
		perInst   = 100
		n         = 5
	)
	_, prefix := cleanRedis(t)
	cfg := Config{MaxConcurrent: n, MaxWait: 30 * time.Second, Lease: 5 * time.Second,
		PollInterval: 100 * time.Millisecond}
	var limiters []*Limiter
	for range instances {
		limiters = append(limiters, startLimiter(t, testenv.Redis(t), prefix, "chat", cfg))
	}

	var holders, maxHolders, granted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, instances*perInst)
	for i := range instances * perInst {
		wg.Go(func() {
			l := limiters[i%instances]
			p, err := l.Acquire(t.Context(), fmt.Sprintf("r%d", i), fmt.Sprintf("u%d", i%17), nil)
			if err != nil {
				errs <- fmt.Errorf("acquire %d: %w", i, err)
				return
			}
			h := holders.Add(1)
			for {
				m := maxHolders.Load()
				if h <= m || maxHolders.CompareAndSwap(m, h) {
					break
				}
			}
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			holders.Add(-1)
			granted.Add(1)
			p.Release()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := maxHolders.Load(); m > n {
		t.Errorf("max concurrent holders = %d, limit %d", m, n)
	}
	if g := granted.Load(); g != instances*perInst {
		t.Errorf("granted %d of %d", g, instances*perInst)
	}
	t.Logf("max concurrent holders %d (limit %d)", maxHolders.Load(), n)
	assertDrained(t, testenv.Redis(t), limiters[0].keys)
}

// TestFairness queues waiters one after another across three instances and
// checks they are granted in exactly that order.
func TestFairness(t *testing.T) {
	t.Parallel()
	const waiters = 15
	_, prefix := cleanRedis(t)
	cfg := Config{MaxConcurrent: 1, MaxWait: 20 * time.Second, Lease: 5 * time.Second,
		PollInterval: 100 * time.Millisecond}
	var limiters []*Limiter
	for range 3 {
		limiters = append(limiters, startLimiter(t, testenv.Redis(t), prefix, "chat", cfg))
	}
	blocker, err := limiters[0].Acquire(t.Context(), "blocker", "b", nil)
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	firstPos := make([]int, waiters)
	for i := range waiters {
		queued := make(chan struct{})
		var once sync.Once
		wg.Go(func() {
			p, err := limiters[i%3].Acquire(t.Context(), fmt.Sprintf("w%d", i), fmt.Sprintf("u%d", i),
				func(pos, _ int) {
					once.Do(func() { firstPos[i] = pos; close(queued) })
				})
			once.Do(func() { close(queued) }) // granted or failed without queueing
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			p.Release()
		})
		<-queued // the next waiter arrives only after this one is queued
	}
	blocker.Release()
	wg.Wait()

	inversions := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			inversions++
		}
	}
	if inversions != 0 || len(order) != waiters {
		t.Errorf("grant order %v: %d inversions", order, inversions)
	}
	for i, pos := range firstPos {
		if pos != i+1 {
			t.Errorf("waiter %d first saw position %d, want %d", i, pos, i+1)
		}
	}
	assertDrained(t, testenv.Redis(t), limiters[0].keys)
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	const maxWait = time.Second
	l, rdb := cleanLimiter(t, "chat", Config{MaxConcurrent: 1, MaxWait: maxWait, Lease: 5 * time.Second,
		PollInterval: 50 * time.Millisecond})
	holder := mustAcquire(t, l, "holder", "a")
	defer holder.Release()

	start := time.Now()
	_, err := l.Acquire(t.Context(), "late", "b", nil)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if elapsed < maxWait || elapsed > maxWait*11/10 {
		t.Errorf("rejected after %v, want within [%v, %v]", elapsed, maxWait, maxWait*11/10)
	}
	if rdb.ZScore(t.Context(), l.keys.queue, "late").Err() != redis.Nil {
		t.Error("timed-out request still queued")
	}
	if got := metricValue(t, l.m.rejections.WithLabelValues(reasonTimeout)); got != 1 {
		t.Errorf("timeout rejections = %v", got)
	}
}

func TestQueueCaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		queued   []string // users whose requests fill the queue
		user     string   // the next request's user
		wantFull bool
	}{
		{"global cap reached", Config{MaxQueue: 2}, []string{"a", "b"}, "c", true},
		{"global cap not reached", Config{MaxQueue: 3}, []string{"a", "b"}, "c", false},
		{"user cap reached", Config{MaxQueuedPerUser: 2}, []string{"a", "a", "b"}, "a", true},
		{"other user under cap", Config{MaxQueuedPerUser: 2}, []string{"a", "a", "b"}, "b", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := cleanRedis(t)
			cfg := tc.cfg
			cfg.MaxConcurrent, cfg.MaxWait, cfg.Lease = 1, 10*time.Second, 5*time.Second
			l := startLimiter(t, rdb, prefix, "chat", cfg)
			holder := mustAcquire(t, l, "holder", "h")
			ctx, cancel := context.WithCancel(t.Context())
			var queued []<-chan acquired
			for i, u := range tc.queued {
				queued = append(queued, acquireQueued(ctx, l, fmt.Sprintf("q%d", i), u))
			}

			start := time.Now()
			actx, acancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			_, err := l.Acquire(actx, "next", tc.user, nil)
			acancel()
			if tc.wantFull {
				if !errors.Is(err, ErrQueueFull) {
					t.Errorf("err = %v, want ErrQueueFull", err)
				}
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Errorf("rejection took %v, want at once", d)
				}
			} else if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want to wait (deadline exceeded)", err)
			}
			cancel()
			for i, q := range queued {
				if r := <-q; !errors.Is(r.err, context.Canceled) {
					t.Errorf("queued request %d: %v", i, r.err)
				}
			}
			holder.Release()
			assertDrained(t, rdb, l.keys)
		})
	}
}

func TestCancelWhileQueuedLeavesAtOnce(t *testing.T) {
	t.Parallel()
	l, rdb := cleanLimiter(t, "chat", Config{MaxConcurrent: 1, MaxWait: 10 * time.Second,
		Lease: 5 * time.Second, MaxQueuedPerUser: 1})
	holder := mustAcquire(t, l, "holder", "h")
	defer holder.Release()

	ctx, cancel := context.WithCancel(t.Context())
	done := acquireQueued(ctx, l, "gone", "u")
	start := time.Now()
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", r.err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Acquire returned %v after cancel", d)
	}
	// Gone the moment Acquire returns, not after the marker expires.
	if n := rdb.ZCard(t.Context(), l.keys.queue).Val(); n != 0 {
		t.Errorf("queue length %d after cancel", n)
	}
	if n := rdb.Exists(t.Context(), l.keys.entry+"gone", l.keys.users, l.keys.deadlines).Val(); n != 0 {
		t.Errorf("%d bookkeeping keys left after cancel", n)
	}
	if rdb.HExists(t.Context(), l.keys.owners, "gone").Val() {
		t.Error("owner entry left after cancel")
	}
	// The user's queue share is free again.
	ctx2, cancel2 := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel2()
	if _, err := l.Acquire(ctx2, "again", "u", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("re-queue after cancel: %v, want deadline exceeded", err)
	}
}

// TestPollingOnly turns Pub/Sub off everywhere: waiters still progress,
// one poll interval at a time.
func TestPollingOnly(t *testing.T) {
	t.Parallel()
	const poll = 50 * time.Millisecond
	_, prefix := cleanRedis(t)
	cfg := Config{MaxConcurrent: 1, MaxWait: 10 * time.Second, Lease: 5 * time.Second, PollInterval: poll, NoPubSub: true}
	a := startLimiter(t, testenv.Redis(t), prefix, "chat", cfg)
	b := startLimiter(t, testenv.Redis(t), prefix, "chat", cfg)

	holder := mustAcquire(t, a, "holder", "h")
	got := make(chan time.Time, 1)
	go func() {
		p, err := b.Acquire(t.Context(), "waiter", "w", nil)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		at := time.Now()
		p.Release() // before reporting, so the drained check below sees it
		got <- at
	}()
	testenv.Eventually(t, 2*time.Second, "waiter queued", func() bool {
		return testenv.Redis(t).ZCard(t.Context(), a.keys.queue).Val() == 1
	})
	released := time.Now()
	holder.Release()
	at, ok := <-got
	if !ok {
		return
	}
	if d := at.Sub(released); d > poll+150*time.Millisecond {
		t.Errorf("handoff by polling took %v, poll interval %v", d, poll)
	}
	if n := metricValue(t, b.m.handoff); n != 0 {
		t.Errorf("handoff histogram observed without Pub/Sub")
	}
	assertDrained(t, testenv.Redis(t), a.keys)
}

func TestRenewalKeepsPermitAndNeverRevivesALostOne(t *testing.T) {
	t.Parallel()
	// Renewed every 300 ms: a renewal stalled for 600 ms on a loaded
	// machine (-race, parallel builds) still keeps the permit.
	const lease = 900 * time.Millisecond
	l, rdb := cleanLimiter(t, "chat", Config{MaxConcurrent: 1, MaxWait: 3 * lease, Lease: lease,
		PollInterval: 50 * time.Millisecond})
	p := mustAcquire(t, l, "long", "a")
	// Held three leases long, the permit is still exclusive.
	if _, err := l.Acquire(t.Context(), "other", "b", nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("second acquire: %v, want ErrTimeout", err)
	}
	// Once lost (as after a Redis data loss) its renewals do not bring it
	// back: the slot is free for another request while p is still held.
	rdb.ZRem(t.Context(), l.keys.permits, "long")
	q, err := l.Acquire(t.Context(), "next", "b", nil)
	if err != nil {
		t.Fatalf("acquire after the loss: %v", err)
	}
	// Renewals every lease/3 would have revived it by now.
	if _, err := l.Acquire(t.Context(), "third", "c", nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("third acquire: %v, want ErrTimeout", err)
	}
	if rdb.ZScore(t.Context(), l.keys.permits, "long").Err() != redis.Nil {
		t.Error("a renewal revived the lost permit")
	}
	p.Release()
	q.Release()
	assertDrained(t, rdb, l.keys)
}

func TestStatsOldestWait(t *testing.T) {
	t.Parallel()
	l, _ := cleanLimiter(t, "chat", Config{MaxConcurrent: 1, MaxWait: 10 * time.Second,
		Lease: 5 * time.Second})
	holder := mustAcquire(t, l, "holder", "h")
	ctx, cancel := context.WithCancel(t.Context())
	// Before the waiter enqueues, so the wait Stats reports cannot exceed
	// time.Since(start) however late this goroutine sees the queue event.
	start := time.Now()
	done := acquireQueued(ctx, l, "w", "u")
	time.Sleep(300 * time.Millisecond)
	st, err := l.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.PermitsInUse != 1 || st.QueueLength != 1 || st.OldestWait < 300*time.Millisecond ||
		st.OldestWait > time.Since(start)+10*time.Millisecond { // Redis TIME vs. this clock: ms rounding
		t.Errorf("stats = %+v after waiting ~300ms", st)
	}
	cancel()
	<-done
	holder.Release()
}
