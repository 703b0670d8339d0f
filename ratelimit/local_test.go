package ratelimit

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// With Redis wholly away, instances on the local policy together grant at
// most MaxConcurrent permits: each takes its share from the number of live
// instances it last saw (4 over 3 instances: 2, 1 and 1), not N each.
func TestLocalPolicySharesTheCap(t *testing.T) {
	t.Parallel()
	const n = 4
	_, prefix := cleanRedis(t)
	cfg := Config{MaxConcurrent: n, MaxWait: time.Second, Lease: 600 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, OnRedisError: PolicyLocal, NoPubSub: true}
	var (
		clients  []*switchableClient
		limiters []*Limiter
	)
	for range 3 {
		c := newSwitchableClient(t)
		clients = append(clients, c)
		limiters = append(limiters, startLimiter(t, c, prefix, "chat", cfg))
	}
	shares := func() (sum int64, each []int64) {
		for _, l := range limiters {
			s := l.local.share.Load()
			sum += s
			each = append(each, s)
		}
		return sum, each
	}
	testenv.Eventually(t, 10*time.Second, "every instance sees the other two", func() bool {
		sum, _ := shares()
		return sum == n
	})

	for _, c := range clients {
		c.cut(t)
	}
	var granted []*Permit
	for i, l := range limiters {
		share := int(l.local.share.Load())
		// Each instance grants its share (an acquire that timed out while
		// still trying Redis on a loaded machine is retried)...
		for j, timeouts := 0, 0; j < share && timeouts < 5; {
			p, err := l.Acquire(t.Context(), fmt.Sprintf("r%d-%d", i, j), "u", nil)
			switch {
			case errors.Is(err, ErrTimeout):
				timeouts++
				continue
			case err != nil:
				t.Fatalf("instance %d: %v", i, err)
			case !p.Local():
				t.Fatalf("instance %d: a permit from Redis during the outage", i)
			}
			granted = append(granted, p)
			j++
		}
		// ...and no more.
		if p, err := l.Acquire(t.Context(), fmt.Sprintf("r%d-over", i), "u", nil); !errors.Is(err, ErrTimeout) {
			t.Errorf("instance %d granted beyond its share of %d: %v", i, share, err)
			if p != nil {
				granted = append(granted, p)
			}
		}
	}
	if _, each := shares(); len(granted) != n {
		t.Errorf("%d local permits granted on 3 instances (shares %v), want %d in all", len(granted), each, n)
	}
	for _, p := range granted {
		p.Release()
	}
}
