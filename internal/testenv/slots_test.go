package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The hook sees both forms of a script call, and the check tells keys under
// one hash tag from keys in different slots, by the cluster's own hashing.
func TestSlotCheck(t *testing.T) {
	addr := clusterAddrs()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(t, "redis cluster", err)
	}

	h := &slotHook{}
	h.record([]any{"evalsha", "abc", 2, "p:{tag}:a", "p:{tag}:b", "arg"})
	h.record([]any{"eval", "return 1", "2", "a", "b"}) // "a" and "b" hash to different slots
	h.record([]any{"evalsha", "abc", 1, "x", "arg"})   // one key: nothing to compare
	h.record([]any{"get", "a"})
	if len(h.calls) != 2 {
		t.Fatalf("recorded %d calls, want 2: %v", len(h.calls), h.calls)
	}
	var list []scriptCall
	for _, call := range h.calls {
		list = append(list, call)
	}
	bad, err := crossSlot(ctx, addr, list)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || !strings.Contains(bad[0], `"a" "b"`) {
		t.Fatalf("cross-slot calls = %q, want only the one on keys a and b", bad)
	}
}
