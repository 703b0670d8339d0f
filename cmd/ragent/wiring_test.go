package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
)

// TestChatRateFailsOpen: with Redis unreachable the per-user chat rate lets
// chats through (the queue's own Redis policy still applies to them).
func TestChatRateFailsOpen(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	r := chatRate{r: ratelimit.NewRate(dead, "t:", "chat", 1, time.Minute), log: slog.New(slog.DiscardHandler)}
	for range 3 {
		if err := r.Allow(context.Background(), "u"); err != nil {
			t.Fatalf("Redis down: %v, want the chat admitted", err)
		}
	}
}

// TestChatRateBusyCarriesRetryAfter: over the limit is ErrBusy with the wait.
func TestChatRateBusyCarriesRetryAfter(t *testing.T) {
	cfg := testConfig(t)
	rdb := testRedis(t, cfg)
	r := chatRate{r: ratelimit.NewRate(rdb, cfg.RedisPrefix, "chat", 1, time.Minute), log: slog.New(slog.DiscardHandler)}
	if err := r.Allow(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	err := r.Allow(context.Background(), "u")
	var se *service.Error
	if !errors.Is(err, service.ErrBusy) || !errors.As(err, &se) || se.RetryAfter <= 0 || se.RetryAfter > time.Minute {
		t.Fatalf("second chat in a minute at 1/min: %v, want ErrBusy with a retry-after within a minute", err)
	}
}
