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
	// reserve counts on a user's two counters: 5 from anywhere, 3 from ip.
	reserve := func(t *testing.T, a *AuthState, user, ip string) time.Duration {
		t.Helper()
		wait, err := a.Reserve(ctx, user, []string{"", ":" + ip}, []int{5, 3}, window)
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

	t.Run("per username limit and release", func(t *testing.T) {
		a := NewAuthState(testenv.Redis(t), testenv.Prefix(t))
		for i := 0; i < 5; i++ {
			if w := reserve(t, a, "ben", fmt.Sprintf("10.0.1.%d", i)); w != 0 {
				t.Fatalf("attempt %d refused (%v)", i, w)
			}
		}
		if w := reserve(t, a, "ben", "10.0.1.99"); w <= 0 {
			t.Fatal("sixth attempt from a sixth address was counted, want refused")
		}
		// A success gives back its own attempt and clears its address.
		if err := a.Release(ctx, "ben", []string{"", ":10.0.1.4"}, []bool{false, true}); err != nil {
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
		for _, k := range a.keys("ben", []string{"", ":10.0.1.0"}) {
			ttl, err := rdb.PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 || ttl > window {
				t.Fatalf("%s: ttl %v (%v), want within the window", k, ttl, err)
			}
		}
		if n, _ := rdb.Get(ctx, a.keys("ben", []string{""})[0]).Int(); n != 5 {
			t.Fatalf("per-username count %d, want 5", n)
		}
		if exists, _ := rdb.Exists(ctx, a.keys("ben", []string{":10.0.1.4"})[0]).Result(); exists != 0 {
			t.Fatal("the successful address's counter was not cleared")
		}
	})

	t.Run("one counter", func(t *testing.T) {
		a := NewAuthState(testenv.Redis(t), testenv.Prefix(t))
		for i := 0; i < 2; i++ {
			if w, err := a.Reserve(ctx, "ip:10.0.3.1", []string{""}, []int{2}, window); err != nil || w != 0 {
				t.Fatalf("attempt %d: %v %v", i, w, err)
			}
		}
		if w, _ := a.Reserve(ctx, "ip:10.0.3.1", []string{""}, []int{2}, window); w <= 0 {
			t.Fatal("third attempt counted, want refused")
		}
		if err := a.Release(ctx, "ip:10.0.3.1", []string{""}, []bool{false}); err != nil {
			t.Fatal(err)
		}
		if w, _ := a.Reserve(ctx, "ip:10.0.3.1", []string{""}, []int{2}, window); w != 0 {
			t.Fatalf("attempt after a give-back refused (%v)", w)
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
			wg.Go(func() {
				w, err := a.Reserve(ctx, "cat", []string{"", fmt.Sprintf(":10.0.2.%d", i%2)}, []int{5, 3}, window)
				if err != nil {
					t.Error(err)
					return
				}
				if w == 0 {
					mu.Lock()
					reserved++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if reserved != 5 {
			t.Fatalf("%d of 50 parallel attempts reserved, want exactly 5 (the per-username limit)", reserved)
		}
	})
}
