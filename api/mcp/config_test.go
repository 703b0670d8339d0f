package mcp

import (
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestConfigDefaults(t *testing.T) {
	apply := func(c Config) Config { return New(Deps{}, c).cfg }
	testenv.Default(t, "MaxSessions", apply, func(c *Config) *int { return &c.MaxSessions }, 1000)
	testenv.Default(t, "MaxSessionsPerKey", apply, func(c *Config) *int { return &c.MaxSessionsPerKey }, 20)
	testenv.Default(t, "SessionIdle", apply, func(c *Config) *time.Duration { return &c.SessionIdle }, 30*time.Minute)
	testenv.Default(t, "MaxBodyBytes", apply, func(c *Config) *int64 { return &c.MaxBodyBytes }, 1<<20)
}
