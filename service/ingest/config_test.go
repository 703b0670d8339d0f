package ingest

import (
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestConfigDefaults(t *testing.T) {
	apply := func(c Config) Config { c.defaults(); return c }
	testenv.Default(t, "MaxBytes", apply, func(c *Config) *int64 { return &c.MaxBytes }, 50<<20)
	testenv.Default(t, "MaxChunks", apply, func(c *Config) *int { return &c.MaxChunks }, 20_000)
	testenv.Default(t, "MaxAttempts", apply, func(c *Config) *int { return &c.MaxAttempts }, 5)
	testenv.Default(t, "RunningTimeout", apply, func(c *Config) *time.Duration { return &c.RunningTimeout }, 15*time.Minute)
	testenv.Default(t, "PendingTimeout", apply, func(c *Config) *time.Duration { return &c.PendingTimeout }, 10*time.Minute)
	testenv.Default(t, "RelayInterval", apply, func(c *Config) *time.Duration { return &c.RelayInterval }, time.Second)
	testenv.Default(t, "ConfirmAfter", apply, func(c *Config) *time.Duration { return &c.ConfirmAfter }, 10*time.Second)
	testenv.Default(t, "ReaperInterval", apply, func(c *Config) *time.Duration { return &c.ReaperInterval }, time.Minute)
	testenv.Default(t, "EmbedBatch", apply, func(c *Config) *int { return &c.EmbedBatch }, 64)
	testenv.Default(t, "OutboxRetention", apply, func(c *Config) *time.Duration { return &c.OutboxRetention }, 7*24*time.Hour)
	testenv.Default(t, "PruneBatch", apply, func(c *Config) *int { return &c.PruneBatch }, 1000)
	testenv.Default(t, "FetchTimeout", apply, func(c *Config) *time.Duration { return &c.FetchTimeout }, 30*time.Second)
	testenv.Default(t, "MinRefresh", apply, func(c *Config) *time.Duration { return &c.MinRefresh }, time.Minute)
	testenv.Default(t, "WebhookMaxAttempts", apply, func(c *Config) *int { return &c.WebhookMaxAttempts }, 8)
	testenv.Default(t, "WebhookBackoff", apply, func(c *Config) *time.Duration { return &c.WebhookBackoff }, 2*time.Second)
	testenv.Default(t, "FetchConcurrency", apply, func(c *Config) *int { return &c.FetchConcurrency }, 8)
	testenv.Default(t, "FetchPerKB", apply, func(c *Config) *int { return &c.FetchPerKB }, 2)
	testenv.Default(t, "WebhookConcurrency", apply, func(c *Config) *int { return &c.WebhookConcurrency }, 8)
	testenv.Default(t, "WebhookDeliveryRetention", apply, func(c *Config) *time.Duration { return &c.WebhookDeliveryRetention }, 30*24*time.Hour)
	testenv.Default(t, "FetchInterval", apply, func(c *Config) *time.Duration { return &c.FetchInterval }, 5*time.Second)

	// Two defaults follow another setting: the reaper runs at least twice
	// per pending timeout, the fetcher at least once per shortest refresh.
	c := apply(Config{PendingTimeout: 40 * time.Second, MinRefresh: 2 * time.Second})
	if c.ReaperInterval != 20*time.Second || c.FetchInterval != 2*time.Second {
		t.Errorf("ReaperInterval %v, FetchInterval %v; want 20s, 2s", c.ReaperInterval, c.FetchInterval)
	}
	if c.Logger == nil || c.Now == nil || c.Parser == nil {
		t.Errorf("Logger, Now or Parser left nil")
	}
}
