package usage

import (
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func TestConfigDefaults(t *testing.T) {
	meter := func(c MeterConfig) MeterConfig { return NewMeter(nil, nil, c).cfg }
	testenv.Default(t, "FlushInterval", meter, func(c *MeterConfig) *time.Duration { return &c.FlushInterval }, time.Second)
	testenv.Default(t, "BatchSize", meter, func(c *MeterConfig) *int { return &c.BatchSize }, 500)
	testenv.Default(t, "MaxBuffered", meter, func(c *MeterConfig) *int { return &c.MaxBuffered }, 100_000)

	quotas := func(c QuotasConfig) QuotasConfig {
		return NewQuotas(nil, nil, NewMeter(nil, nil, MeterConfig{}), nil, c).cfg
	}
	testenv.Default(t, "Refresh", quotas, func(c *QuotasConfig) *time.Duration { return &c.Refresh }, 10*time.Second)

	if m, q := meter(MeterConfig{}), quotas(QuotasConfig{}); m.Logger == nil || m.Now == nil || q.Logger == nil || q.Now == nil {
		t.Errorf("a Logger or Now left nil")
	}
}
