package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/lease"
	"github.com/ragent-go/ragent/internal/testenv"
)

func TestRenewAndRelease(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := t.Context()
	key := testenv.Prefix(t) + "lease"
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	if err := rdb.Set(ctx, key, "ours", time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	if held, err := lease.Renew(ctx, rdb, key, "ours", time.Minute); err != nil || !held {
		t.Fatalf("Renew(ours) = %v, %v; want true", held, err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl < 30*time.Second {
		t.Errorf("PTTL after renewal = %v, want about a minute", ttl)
	}
	if held, err := lease.Renew(ctx, rdb, key, "theirs", time.Hour); err != nil || held {
		t.Fatalf("Renew(theirs) = %v, %v; want false", held, err)
	}
	if released, err := lease.Release(ctx, rdb, key, "theirs", 0); err != nil || released {
		t.Fatalf("Release(theirs) = %v, %v; want false", released, err)
	}
	if released, err := lease.Release(ctx, rdb, key, "ours", 100*time.Millisecond); err != nil || !released {
		t.Fatalf("Release(ours, guard) = %v, %v; want true", released, err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 100*time.Millisecond {
		t.Errorf("PTTL after a guarded release = %v, want the guard", ttl)
	}
	if released, err := lease.Release(ctx, rdb, key, "ours", 0); err != nil || !released {
		t.Fatalf("Release(ours) = %v, %v; want true", released, err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("the key survived its release")
	}
}

func TestEveryRepeatsUntilZero(t *testing.T) {
	var calls atomic.Int32
	done := make(chan struct{})
	r := lease.Every(t.Context(), time.Millisecond, func(context.Context) time.Duration {
		if calls.Add(1) == 3 {
			close(done)
			return 0
		}
		return time.Millisecond
	})
	defer r.Stop()
	<-done
	r.Stop()
	if n := calls.Load(); n != 3 {
		t.Errorf("renewals = %d, want 3 (none after renew returned 0)", n)
	}
}

func TestStopCancelsAndWaitsForARenewal(t *testing.T) {
	started := make(chan struct{})
	var finished, calls atomic.Int32
	r := lease.Every(context.Background(), time.Millisecond, func(ctx context.Context) time.Duration {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done() // a Redis call that only Stop ends
		finished.Add(1)
		return time.Millisecond
	})
	<-started
	r.Stop()
	if finished.Load() != 1 {
		t.Fatal("Stop returned before the renewal in progress")
	}
	r.Stop() // a second Stop is harmless
	if n := calls.Load(); n != 1 {
		t.Errorf("renewals after Stop: %d calls in all, want 1", n)
	}
}
