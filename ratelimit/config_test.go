package ratelimit

import (
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestConfigDefaults(t *testing.T) {
	apply := func(c Config) Config { return c.withDefaults(defaultMaxWait, defaultLease) }
	testenv.Default(t, "MaxConcurrent", apply, func(c *Config) *int { return &c.MaxConcurrent }, 10)
	testenv.Default(t, "MaxWait", apply, func(c *Config) *time.Duration { return &c.MaxWait }, 15*time.Second)
	testenv.Default(t, "Lease", apply, func(c *Config) *time.Duration { return &c.Lease }, 30*time.Second)
	testenv.Default(t, "PollInterval", apply, func(c *Config) *time.Duration { return &c.PollInterval }, 200*time.Millisecond)
	if c := apply(Config{}); c.Logger == nil || c.Now == nil {
		t.Errorf("Logger or Now left nil")
	}
}
