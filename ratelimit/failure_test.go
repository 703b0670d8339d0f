package ratelimit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// deadRedis is a client whose server never answers (nothing listens on
// port 1).
func deadRedis(t testing.TB) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisDownPolicy(t *testing.T) {
	t.Parallel()
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		l := startLimiter(t, deadRedis(t), "", "chat", Config{MaxConcurrent: 2, MaxWait: 2 * time.Second,
			OnRedisError: PolicyReject, NoPubSub: true})
		start := time.Now()
		_, err := l.Acquire(t.Context(), "r", "u", nil)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrQueueFull) {
			t.Fatalf("err = %v, want only ErrUnavailable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("rejection took %v", d)
		}
		// Within a second of the failure, the next acquire does not ask Redis.
		start = time.Now()
		if _, err := l.Acquire(t.Context(), "r2", "u", nil); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("second acquire: %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > 10*time.Millisecond {
			t.Errorf("second rejection took %v, want at once", d)
		}
		if n := metricValue(t, l.m.rejections.WithLabelValues(reasonUnavailable)); n != 2 {
			t.Errorf("unavailable rejections = %v", n)
		}
		if n := metricValue(t, l.m.redisErrors); n < 1 {
			t.Errorf("redis errors = %v", n)
		}
	})
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		const maxWait = 500 * time.Millisecond
		l := startLimiter(t, deadRedis(t), "", "chat", Config{MaxConcurrent: 2, MaxWait: maxWait,
			OnRedisError: PolicyLocal, NoPubSub: true})
		var held []*Permit
		for i := range 2 {
			p, err := l.Acquire(t.Context(), fmt.Sprint("r", i), "u", nil)
			if err != nil {
				t.Fatalf("local acquire %d: %v", i, err)
			}
			if !p.Local() {
				t.Error("permit not from the local semaphore")
			}
			held = append(held, p)
		}
		// The local semaphore bounds this instance at N.
		if _, err := l.Acquire(t.Context(), "r3", "u", nil); !errors.Is(err, ErrTimeout) {
			t.Fatalf("third acquire: %v, want ErrTimeout", err)
		}
		held[0].Release()
		held[0].Release() // idempotent: must not free a second slot
		p, err := l.Acquire(t.Context(), "r4", "u", nil)
		if err != nil {
			t.Fatalf("acquire after release: %v", err)
		}
		if _, err := l.Acquire(t.Context(), "r5", "u", nil); !errors.Is(err, ErrTimeout) {
			t.Fatalf("double release freed a slot: %v", err)
		}
		p.Release()
		held[1].Release()
		if n := metricValue(t, l.m.fallbacks); n != 5 {
			t.Errorf("fallbacks = %v, want 5", n)
		}
	})
}

// TestRedisOutageAndRecovery cuts an instance's Redis connections mid-run:
// with PolicyLocal it serves from the local semaphore, and once Redis is back
// new acquires go through Redis again with nothing leaked.
func TestRedisOutageAndRecovery(t *testing.T) {
	t.Parallel()
	rdb, prefix := cleanRedis(t)
	c := newSwitchableClient(t)
	var skew atomic.Int64 // lets the test skip the pause after a failure
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	l := startLimiter(t, c, prefix, "chat", Config{MaxConcurrent: 2, MaxWait: time.Second, Lease: 2 * time.Second,
		PollInterval: 50 * time.Millisecond, OnRedisError: PolicyLocal, Now: now})
	ctx := t.Context()

	before, err := l.Acquire(ctx, "before", "u", nil)
	if err != nil || before.Local() {
		t.Fatalf("acquire before outage: local=%v err=%v", before != nil && before.Local(), err)
	}

	c.cut(t)
	during, err := l.Acquire(ctx, "during", "u", nil)
	if err != nil {
		t.Fatalf("acquire during outage: %v", err)
	}
	if !during.Local() {
		t.Error("permit during outage not local")
	}
	before.Release() // fails against Redis; the lease expires it

	// Right after the failure, acquires go local without asking Redis.
	c.restore()
	again, err := l.Acquire(ctx, "again", "u", nil)
	if err != nil || !again.Local() {
		t.Fatalf("acquire within the pause: local=%v err=%v", again != nil && again.Local(), err)
	}
	again.Release()
	skew.Add(int64(redisRetryAfter))
	after, err := l.Acquire(ctx, "after", "u", nil)
	if err != nil {
		t.Fatalf("acquire after recovery: %v", err)
	}
	if after.Local() {
		t.Error("permit after recovery still local")
	}
	if rdb.ZScore(ctx, l.keys.permits, "after").Err() != nil {
		t.Error("permit after recovery not in Redis")
	}
	during.Release() // local: touches nothing in Redis
	after.Release()
	// "before" could not be released while Redis was away: its lease ends it.
	testenv.Eventually(t, 3*time.Second, "lease of the unreleased permit expires", func() bool {
		st, err := l.Stats(ctx)
		return err == nil && st.PermitsInUse == 0
	})
	final, err := l.Acquire(ctx, "final", "u", nil)
	if err != nil {
		t.Fatalf("acquire at the end: %v", err)
	}
	final.Release()
	assertDrained(t, rdb, l.keys)
	if n := metricValue(t, l.m.fallbacks); n != 2 {
		t.Errorf("fallbacks = %v, want 2", n)
	}
}

// TestRedisRestartMidRun keeps two instances busy while Redis "restarts":
// connections killed, script cache flushed, and (no persistence) the data
// gone. Work continues, a permit held across the loss is released without
// error, and nothing is left behind at the end.
func TestRedisRestartMidRun(t *testing.T) {
	t.Parallel()
	const n = 3
	prefix := testenv.Prefix(t)
	admin := testenv.Redis(t)
	cleanupKeys(t, admin, prefix)
	cfg := Config{MaxConcurrent: n, MaxWait: 10 * time.Second, Lease: 600 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, OnRedisError: PolicyReject}
	clients := []*switchableClient{newSwitchableClient(t), newSwitchableClient(t)}
	limiters := []*Limiter{
		startLimiter(t, clients[0], prefix, "chat", cfg),
		startLimiter(t, clients[1], prefix, "chat", cfg),
	}

	stop := make(chan struct{})
	var (
		wg              sync.WaitGroup
		grants, refused atomic.Int64
		seq             atomic.Int64
	)
	for i := range 10 {
		wg.Go(func() {
			l := limiters[i%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := l.Acquire(t.Context(), fmt.Sprint("r", seq.Add(1)), fmt.Sprint("u", i), nil)
				if err != nil {
					// Connections die under in-flight calls; the policy says reject.
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("acquire: %v", err)
						return
					}
					refused.Add(1)
					continue
				}
				grants.Add(1)
				time.Sleep(30 * time.Millisecond) // the work the permit is held for
				p.Release()
			}
		})
	}
	// One permit held across the restart.
	long, err := limiters[0].Acquire(t.Context(), "long", "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "grants before the restart", func() bool { return grants.Load() > 0 })
	before := grants.Load()

	// The restart: connections dropped, scripts and data gone.
	for _, c := range clients {
		killClients(t, admin, c.name)
	}
	if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	k := limiters[0].keys
	admin.Del(t.Context(), k.queue, k.seq, k.permits, k.users, k.levels, k.owners, k.held, k.deadlines)

	testenv.Eventually(t, 10*time.Second, "grants after the restart", func() bool { return grants.Load() > before })
	long.Release()
	close(stop)
	wg.Wait()
	t.Logf("grants %d (before restart %d), refused %d", grants.Load(), before, refused.Load())
	assertDrained(t, admin, k)
}
