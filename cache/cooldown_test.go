package cache

import (
	"context"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestCooldowns(t *testing.T) {
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	// Two instances: two clients on one Redis.
	a, b := NewCooldowns(testenv.Redis(t), prefix), NewCooldowns(testenv.Redis(t), prefix)

	if d, err := b.CoolingFor(ctx, "openai/qwen3"); err != nil || d != 0 {
		t.Fatalf("fresh endpoint cooling for %v (err %v)", d, err)
	}
	if err := a.Cool(ctx, "openai/qwen3", time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, err := b.CoolingFor(ctx, "openai/qwen3"); err != nil || d < 55*time.Second || d > time.Minute {
		t.Fatalf("the other instance sees %v (err %v), want about 1m", d, err)
	}
	// A shorter cooldown never cuts a longer one short; a longer one
	// extends it.
	if err := b.Cool(ctx, "openai/qwen3", time.Second); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.CoolingFor(ctx, "openai/qwen3"); d < 55*time.Second {
		t.Fatalf("a 1s cooldown shortened a 1m one to %v", d)
	}
	if err := b.Cool(ctx, "openai/qwen3", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.CoolingFor(ctx, "openai/qwen3"); d < 4*time.Minute {
		t.Fatalf("a 5m cooldown left %v", d)
	}
	if d, _ := a.CoolingFor(ctx, "anthropic/claude"); d != 0 {
		t.Fatalf("another endpoint cooling for %v", d)
	}
	if ttl := testenv.Redis(t).PTTL(ctx, prefix+"llm:cooldown:openai/qwen3").Val(); ttl <= 0 {
		t.Fatalf("key {prefix}llm:cooldown:{endpoint} has TTL %v", ttl)
	}
}
