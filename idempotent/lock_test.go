package idempotent_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestLocksConcurrentAcquireOneWins(t *testing.T) {
	rdb := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	locks := idempotent.NewLocks(rdb, "", 5*time.Second, idempotent.Config{Registerer: reg})
	key := idempotent.SubmitKey(testenv.Prefix(t), "/api/v1/chat", "7", []byte(`{"question":"hi"}`))
	ctx := context.Background()

	const n = 50
	var (
		mu      sync.Mutex
		winners []*idempotent.Lock
		locked  int
		others  []error
	)
	testenv.Together(n, func(int) {
		lock, err := locks.Acquire(ctx, key)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			winners = append(winners, lock)
		case errors.Is(err, idempotent.ErrLocked):
			locked++
		default:
			others = append(others, err)
		}
	})

	if len(winners) != 1 || locked != n-1 || len(others) != 0 {
		t.Fatalf("winners=%d locked=%d other errors=%v; want 1, %d, none", len(winners), locked, others, n-1)
	}
	if got := counter(t, reg, "ragent_idempotent_locks_acquired_total", nil); got != 1 {
		t.Errorf("locks_acquired_total = %v, want 1", got)
	}
	if got := counter(t, reg, "ragent_idempotent_lock_conflicts_total", nil); got != n-1 {
		t.Errorf("lock_conflicts_total = %v, want %d", got, n-1)
	}
	if err := winners[0].Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	assertLockable(t, locks, key)
}

func TestLockWatchdogKeepsLockPastTTL(t *testing.T) {
	rdb := testenv.Redis(t)
	const ttl = 600 * time.Millisecond // renewed every 200 ms: robust on a loaded 2-core CI machine
	locks := idempotent.NewLocks(rdb, "", ttl, idempotent.Config{})
	key := testenv.Prefix(t) + "idem:submit:slow"
	ctx := context.Background()

	lock, err := locks.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 || pttl > ttl {
		t.Fatalf("initial PTTL %v, want in (0, %v]", pttl, ttl)
	}

	time.Sleep(4 * ttl) // a slow request: four initial TTLs

	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 {
		t.Fatalf("PTTL after %v = %v; the watchdog did not keep the lock", 4*ttl, pttl)
	}
	if _, err := locks.Acquire(ctx, key); !errors.Is(err, idempotent.ErrLocked) {
		t.Fatalf("second acquire while held: err = %v, want ErrLocked", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("key still exists after release")
	}
	// The watchdog is stopped: nothing recreates or extends the key.
	time.Sleep(ttl / 2)
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("key reappeared after release")
	}
	assertLockable(t, locks, key)
}

func TestLockReleaseByFormerOwnerKeepsNewOwnersLock(t *testing.T) {
	rdb := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	logger, logs := newTestLogger()
	locks := idempotent.NewLocks(rdb, "", 300*time.Millisecond, idempotent.Config{Registerer: reg, Logger: logger})
	key := testenv.Prefix(t) + "idem:submit:handover"
	ctx := context.Background()

	first, err := locks.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	// The first holder's lock vanishes, as after a long GC pause past its TTL.
	rdb.Del(ctx, key)
	testenv.Eventually(t, 2*time.Second, "the first watchdog to notice the loss", func() bool {
		return counter(t, reg, "ragent_idempotent_leases_lost_total", map[string]string{"component": "lock"}) == 1
	})
	second, err := locks.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("second acquire: %v", err)
	}
	secondToken := rdb.Get(ctx, key).Val()

	if err := first.Release(ctx); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Fatalf("release by former owner: err = %v, want ErrNotOwner", err)
	}
	if got := rdb.Get(ctx, key).Val(); got != secondToken {
		t.Fatalf("former owner's release changed the lock: %q, want %q", got, secondToken)
	}
	if _, err := locks.Acquire(ctx, key); !errors.Is(err, idempotent.ErrLocked) {
		t.Fatalf("acquire while the second holds it: err = %v, want ErrLocked", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("release by owner: %v", err)
	}
	if err := second.Release(ctx); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Fatalf("second release: err = %v, want ErrNotOwner", err)
	}
	if !containsAll(logs.String(), "submit lock lost", key) {
		t.Errorf("lost lock not logged; logs:\n%s", logs)
	}
}

func TestLocksRedisErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	locks := idempotent.NewLocks(unreachableRedis(t), "", time.Second, idempotent.Config{Registerer: reg})

	_, err := locks.Acquire(context.Background(), "k")
	if !errors.Is(err, idempotent.ErrUnavailable) {
		t.Fatalf("acquire on a down Redis: err = %v, want ErrUnavailable", err)
	}
	if got := counter(t, reg, "ragent_idempotent_redis_errors_total", map[string]string{"component": "lock"}); got != 1 {
		t.Errorf("redis_errors_total{component=lock} = %v, want 1", got)
	}

	// A caller that gave up is not a Redis outage.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = idempotent.NewLocks(testenv.Redis(t), "", time.Second, idempotent.Config{}).Acquire(ctx, testenv.Prefix(t)+"k")
	if !errors.Is(err, context.Canceled) || errors.Is(err, idempotent.ErrUnavailable) {
		t.Fatalf("acquire with a cancelled context: err = %v, want context.Canceled only", err)
	}
}

// TestLocksAcquireSubmitUsesTheirPrefix: the Locks own their key prefix;
// callers name the request, not the Redis key.
func TestLocksAcquireSubmitUsesTheirPrefix(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	locks := idempotent.NewLocks(rdb, prefix, 5*time.Second, idempotent.Config{})
	ctx := context.Background()
	body := []byte(`{"question":"hi","kb":"1"}`)
	lock, err := locks.AcquireSubmit(ctx, "/api/v1/chat", "7", body)
	if err != nil {
		t.Fatal(err)
	}
	if want := idempotent.SubmitKey(prefix, "/api/v1/chat", "7", body); lock.Key() != want {
		t.Fatalf("key %q, want %q", lock.Key(), want)
	}
	if n, err := rdb.Exists(ctx, lock.Key()).Result(); err != nil || n != 1 {
		t.Fatalf("lock key in Redis: %d, %v", n, err)
	}
	if _, err := locks.AcquireSubmit(ctx, "/api/v1/chat", "7", []byte(`{"kb":"1","question":"hi"}`)); !errors.Is(err, idempotent.ErrLocked) {
		t.Fatalf("same submit, reordered body: %v, want ErrLocked", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// assertLockable checks that key is free: it can be locked, and released.
func assertLockable(t *testing.T, locks *idempotent.Locks, key string) {
	t.Helper()
	lock, err := locks.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// failingHook fails every command while set, as a Redis that went away
// (or is being failed over) does.
type failingHook struct{ failing atomic.Bool }

var errRedisAway = errors.New("injected: redis is away")

func (h *failingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.failing.Load() {
			cmd.SetErr(errRedisAway)
			return errRedisAway
		}
		return next(ctx, cmd)
	}
}

func (h *failingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.failing.Load() {
			return errRedisAway
		}
		return next(ctx, cmds)
	}
}

// A submit whose lock release failed because Redis was away must not leave
// its retries refused as duplicates for the lock's whole ttl: once Redis
// answers again the lock is gone within a few backoff rounds.
func TestLockReleasedAfterRedisRecovers(t *testing.T) {
	rdb := testenv.Redis(t)
	hook := &failingHook{}
	rdb.AddHook(hook)
	reg := prometheus.NewRegistry()
	const ttl = time.Minute // far longer than the test may take
	locks := idempotent.NewLocks(rdb, testenv.Prefix(t), ttl, idempotent.Config{Registerer: reg})
	ctx := context.Background()
	body := []byte(`{"question":"released?"}`)

	lock, err := locks.AcquireSubmit(ctx, "/api/v1/chat", "7", body)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	hook.failing.Store(true)
	if err := lock.Release(ctx); !errors.Is(err, idempotent.ErrUnavailable) {
		t.Fatalf("release while Redis is away = %v, want ErrUnavailable", err)
	}
	// A retry while Redis is away cannot take the lock either: the caller
	// serves it without the guard (the database's unique keys remain).
	if _, err := locks.AcquireSubmit(ctx, "/api/v1/chat", "7", body); !errors.Is(err, idempotent.ErrUnavailable) {
		t.Fatalf("acquire while Redis is away = %v, want ErrUnavailable", err)
	}
	hook.failing.Store(false)

	deadline := time.Now().Add(10 * time.Second)
	for {
		again, err := locks.AcquireSubmit(ctx, "/api/v1/chat", "7", body)
		if err == nil {
			if err := again.Release(ctx); err != nil {
				t.Fatalf("release the retry's lock: %v", err)
			}
			break
		}
		if !errors.Is(err, idempotent.ErrLocked) {
			t.Fatalf("retry: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a retry still finds the failed request's lock 10 s after Redis returned (ttl %v)", ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := counter(t, reg, "ragent_idempotent_late_releases_total", nil); got != 1 {
		t.Errorf("late_releases_total = %v, want 1", got)
	}
}
