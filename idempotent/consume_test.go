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

const consumedTTL = time.Hour

// newGuard returns a Guard with a 5 s lease on the test's Redis under a
// prefix of its own, and the client and prefix to look at its keys.
func newGuard(t *testing.T, cfg idempotent.Config) (*idempotent.Guard, redis.UniversalClient, string) {
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	return idempotent.NewGuard(rdb, prefix, 5*time.Second, consumedTTL, cfg), rdb, prefix
}

func TestGuardRunsMessageOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	guard, rdb, prefix := newGuard(t, idempotent.Config{Registerer: reg})
	ctx := context.Background()
	const msg = "101:1"

	var runs atomic.Int32
	release := make(chan struct{})
	handle := guard.Wrap("ingest", func(ctx context.Context, key string, body []byte) error {
		if key != msg || string(body) != "payload" {
			t.Errorf("handler got %q, %q", key, body)
		}
		// Only the first run waits, so a broken guard fails the test
		// instead of hanging it.
		if runs.Add(1) == 1 {
			<-release
		}
		return nil
	})

	// Five concurrent deliveries: one runs (and is held until the other four
	// have answered), the rest are told it is in flight.
	const n = 5
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { errs <- handle(ctx, msg, []byte("payload")) })
	}
	var inFlight int
	for range n - 1 {
		if err := <-errs; errors.Is(err, idempotent.ErrInFlight) {
			inFlight++
		} else {
			t.Errorf("concurrent delivery: err = %v, want ErrInFlight", err)
		}
	}
	close(release)
	if err := <-errs; err != nil {
		t.Fatalf("the delivery that ran: err = %v", err)
	}
	wg.Wait()
	if runs.Load() != 1 || inFlight != n-1 {
		t.Fatalf("runs=%d inFlight=%d; want 1 and %d", runs.Load(), inFlight, n-1)
	}

	key := prefix + "idem:consume:ingest:" + msg
	if v := rdb.Get(ctx, key).Val(); v != "CONSUMED" {
		t.Fatalf("state %q, want CONSUMED", v)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= consumedTTL-time.Minute || pttl > consumedTTL {
		t.Errorf("CONSUMED PTTL %v, want ≈ %v", pttl, consumedTTL)
	}

	// Five redeliveries after it was consumed: acked without running.
	for i := range n {
		if err := handle(ctx, msg, []byte("payload")); err != nil {
			t.Fatalf("redelivery %d: err = %v, want nil", i, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
	for result, want := range map[string]float64{"processed": 1, "in_flight": n - 1, "duplicate": n} {
		if got := counter(t, reg, "ragent_idempotent_consume_total", map[string]string{"result": result}); got != want {
			t.Errorf("consume_total{result=%s} = %v, want %v", result, got, want)
		}
	}

	// Groups are independent: another group processes the same message.
	other := guard.Wrap("audit", func(context.Context, string, []byte) error { runs.Add(1); return nil })
	if err := other(ctx, msg, nil); err != nil || runs.Load() != 2 {
		t.Fatalf("other group: err = %v, runs = %d; want nil, 2", err, runs.Load())
	}
}

func TestGuardFailureLetsRedeliveryRetry(t *testing.T) {
	guard, rdb, prefix := newGuard(t, idempotent.Config{})
	ctx := context.Background()
	errParse := errors.New("embedding endpoint returned 503")

	var runs atomic.Int32
	handle := guard.Wrap("ingest", func(context.Context, string, []byte) error {
		if runs.Add(1) == 1 {
			return errParse
		}
		return nil
	})
	if err := handle(ctx, "7:1", nil); !errors.Is(err, errParse) {
		t.Fatalf("first delivery: err = %v, want the handler's", err)
	}
	if n := rdb.Exists(ctx, prefix+"idem:consume:ingest:7:1").Val(); n != 0 {
		t.Fatalf("the failed message's mark was kept")
	}
	if err := handle(ctx, "7:1", nil); err != nil {
		t.Fatalf("redelivery: err = %v", err)
	}
	if err := handle(ctx, "7:1", nil); err != nil {
		t.Fatalf("third delivery: err = %v", err)
	}
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (failure, then success)", runs.Load())
	}
}

func TestGuardInFlightElsewhere(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// occupy marks the message as being consumed by someone else and
		// returns a func that ends that.
		occupy func(t *testing.T, rdb redis.UniversalClient, prefix, key string) func()
	}{
		{
			name: "another instance's handler is running",
			occupy: func(t *testing.T, _ redis.UniversalClient, prefix, key string) func() {
				other := idempotent.NewGuard(testenv.Redis(t), prefix, 5*time.Second, consumedTTL, idempotent.Config{})
				started, release := make(chan struct{}), make(chan struct{})
				done := make(chan error, 1)
				go func() {
					done <- other.Wrap("ingest", func(context.Context, string, []byte) error {
						close(started)
						<-release
						return nil
					})(ctx, key, nil)
				}()
				<-started
				return func() {
					close(release)
					if err := <-done; err != nil {
						t.Errorf("other instance: %v", err)
					}
				}
			},
		},
		{
			name: "a bare CONSUMING mark",
			occupy: func(t *testing.T, rdb redis.UniversalClient, prefix, key string) func() {
				rdb.Set(ctx, prefix+"idem:consume:ingest:"+key, "CONSUMING", time.Minute)
				return func() {}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			guard, rdb, prefix := newGuard(t, idempotent.Config{})
			done := tt.occupy(t, rdb, prefix, "9:2")
			defer done()
			err := guard.Wrap("ingest", func(context.Context, string, []byte) error {
				t.Error("handler ran while the message was being consumed elsewhere")
				return nil
			})(ctx, "9:2", nil)
			if !errors.Is(err, idempotent.ErrInFlight) {
				t.Fatalf("err = %v, want ErrInFlight", err)
			}
		})
	}
}

func TestGuardRenewsMarkWhileHandlerRuns(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	// Renewed every 200 ms: a watchdog stalled for 400 ms on a loaded
	// machine (-race, parallel builds) still keeps the mark.
	const consumingTTL = 600 * time.Millisecond
	guard := idempotent.NewGuard(rdb, prefix, consumingTTL, consumedTTL, idempotent.Config{})
	ctx := context.Background()

	var runs atomic.Int32
	release := make(chan struct{})
	handle := guard.Wrap("ingest", func(context.Context, string, []byte) error {
		if runs.Add(1) == 1 {
			<-release
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- handle(ctx, "big-document", nil) }()
	testenv.Eventually(t, 2*time.Second, "the first delivery to start", func() bool { return runs.Load() == 1 })

	time.Sleep(4 * consumingTTL) // the handler outlives its initial mark
	if err := handle(ctx, "big-document", nil); !errors.Is(err, idempotent.ErrInFlight) {
		t.Fatalf("redelivery during a slow handler: err = %v, want ErrInFlight", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("slow handler: %v", err)
	}
	if err := handle(ctx, "big-document", nil); err != nil || runs.Load() != 1 {
		t.Fatalf("after completion: err = %v, runs = %d; want nil, 1", err, runs.Load())
	}
}

func TestGuardCrashedConsumerMarkExpires(t *testing.T) {
	guard, rdb, prefix := newGuard(t, idempotent.Config{})
	ctx := context.Background()
	key := prefix + "idem:consume:ingest:3:1"
	// A consumer died mid-document: its mark outlives it by at most one TTL.
	rdb.Set(ctx, key, "CONSUMING:dead-consumer", 200*time.Millisecond)

	var runs atomic.Int32
	handle := guard.Wrap("ingest", func(context.Context, string, []byte) error { runs.Add(1); return nil })
	if err := handle(ctx, "3:1", nil); !errors.Is(err, idempotent.ErrInFlight) {
		t.Fatalf("delivery while the dead mark lives: err = %v, want ErrInFlight", err)
	}
	testenv.Eventually(t, 2*time.Second, "the dead consumer's mark to expire", func() bool {
		return rdb.Exists(ctx, key).Val() == 0
	})
	if err := handle(ctx, "3:1", nil); err != nil || runs.Load() != 1 {
		t.Fatalf("redelivery after expiry: err = %v, runs = %d; want nil, 1", err, runs.Load())
	}
}

func TestGuardRedisDownStillProcesses(t *testing.T) {
	reg := prometheus.NewRegistry()
	logger, logs := newTestLogger()
	guard := idempotent.NewGuard(unreachableRedis(t), "p:", time.Second, time.Hour,
		idempotent.Config{Registerer: reg, Logger: logger})
	errHandler := errors.New("parse failed")

	tests := []struct {
		name    string
		handler error
	}{
		{"handler succeeds", nil},
		{"handler fails", errHandler},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int32
			err := guard.Wrap("ingest", func(context.Context, string, []byte) error {
				runs.Add(1)
				return tt.handler
			})(context.Background(), "5:1", nil)
			if runs.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1: Redis being down must not stop consumption", runs.Load())
			}
			if !errors.Is(err, tt.handler) {
				t.Fatalf("err = %v, want the handler's (%v)", err, tt.handler)
			}
		})
	}
	if got := counter(t, reg, "ragent_idempotent_consume_total", map[string]string{"result": "degraded"}); got != 2 {
		t.Errorf("consume_total{result=degraded} = %v, want 2", got)
	}
	if got := counter(t, reg, "ragent_idempotent_redis_errors_total", map[string]string{"component": "consume"}); got != 2 {
		t.Errorf("redis_errors_total{component=consume} = %v, want 2", got)
	}
	if !containsAll(logs.String(), "level=ERROR", "consume guard cannot reach Redis", "p:idem:consume:ingest:5:1") {
		t.Errorf("degradation not logged; logs:\n%s", logs)
	}
}
