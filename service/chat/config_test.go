package chat

import (
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestConfigDefaults(t *testing.T) {
	apply := func(c Config) Config { return New(Deps{}, c).cfg }
	testenv.Default(t, "HistoryMessages", apply, func(c *Config) *int { return &c.HistoryMessages }, 16)
	testenv.Default(t, "TopK", apply, func(c *Config) *int { return &c.TopK }, 5)
	testenv.Default(t, "MaxAnswerTokens", apply, func(c *Config) *int { return &c.MaxAnswerTokens }, 4096)
	if c := apply(Config{}); c.Logger == nil || c.Now == nil {
		t.Errorf("Logger or Now left nil")
	}
}
