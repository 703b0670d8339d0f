package cache

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestLoginAttemptCounters(t *testing.T) {
	ctx := context.Background()
	const window = time.Minute
	reserve := func(t *testing.T, a *AuthState, user, ip string) time.Duration {
		t.Helper()
		wait, err := a.Reserve(ctx, user, ip, 5, 3, window)
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}

	t.Run("per address limit", func(t *testing.T) {
		a := NewAuthState(testenv.Redis(t), testenv.Prefix(t))
		for i := 0; i < 3; i++ {
			if w := reserve(t, a, "amy", "10.0.0.1"); w != 0 {
				t.Fatalf("attempt %d refused (%v)", i, w)
			}
		}
		if w := reserve(t, a, "amy", "10.0.0.1"); w <= 0 || w > window {
			t.Fatalf("fourth attempt from one address: wait %v, want 0 < wait ≤ %v", w, window)
		}
		if w := reserve(t, a, "amy", "10.0.0.2"); w != 0 {
			t.Fatalf("another address refused (%v)", w)
		}
	})

	t.Run("per username limit and reset", func(t *testing.T) {
		a := NewAuthState(testenv.Redis(t), testenv.Prefix(t))
		for i := 0; i < 5; i++ {
			if w := reserve(t, a, "ben", fmt.Sprintf("10.0.1.%d", i)); w != 0 {
				t.Fatalf("attempt %d refused (%v)", i, w)
			}
		}
		if w := reserve(t, a, "ben", "10.0.1.99"); w <= 0 {
			t.Fatal("sixth attempt from a sixth address was counted, want refused")
		}
		// A success gives back its own attempt only.
		if err := a.Reset(ctx, "ben", "10.0.1.4"); err != nil {
			t.Fatal(err)
		}
		if w := reserve(t, a, "ben", "10.0.1.99"); w != 0 {
			t.Fatalf("attempt after a success refused (%v)", w)
		}
		if w := reserve(t, a, "ben", "10.0.1.98"); w <= 0 {
			t.Fatal("a success cleared the other addresses' failures")
		}
		// A refused attempt counts nothing, and no key outlives the window.
		rdb := testenv.Redis(t)
		for _, k := range a.loginKeys("ben", "10.0.1.0") {
			ttl, err := rdb.PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 || ttl > window {
				t.Fatalf("%s: ttl %v (%v), want within the window", k, ttl, err)
			}
		}
		if n, _ := rdb.Get(ctx, a.loginKeys("ben", "x")[0]).Int(); n != 5 {
			t.Fatalf("per-username count %d, want 5", n)
		}
	})

	t.Run("parallel attempts", func(t *testing.T) {
		a := NewAuthState(testenv.Redis(t), testenv.Prefix(t))
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			reserved int
		)
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, err := a.Reserve(ctx, "cat", fmt.Sprintf("10.0.2.%d", i%2), 5, 3, window)
				if err != nil {
					t.Error(err)
					return
				}
				if w == 0 {
					mu.Lock()
					reserved++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if reserved != 5 {
			t.Fatalf("%d of 50 parallel attempts reserved, want exactly 5 (the per-username limit)", reserved)
		}
	})
}
