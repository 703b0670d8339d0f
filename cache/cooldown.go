package cache

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cooldowns shares model endpoints' cooldowns between instances: an
// endpoint that one instance saw fail (429, 5xx, a timeout) is skipped by
// all of them until its key {prefix}llm:cooldown:{endpoint} expires. The
// key holds nothing but its TTL, so a lost Redis only forgets cooldowns.
type Cooldowns struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewCooldowns returns Cooldowns on rdb.
func NewCooldowns(rdb redis.UniversalClient, prefix string) *Cooldowns {
	return &Cooldowns{rdb: rdb, prefix: prefix}
}

func (c *Cooldowns) key(endpoint string) string { return c.prefix + "llm:cooldown:" + endpoint }

// CoolingFor returns how long endpoint still cools down; 0 when it does not.
func (c *Cooldowns) CoolingFor(ctx context.Context, endpoint string) (time.Duration, error) {
	d, err := c.rdb.PTTL(ctx, c.key(endpoint)).Result()
	if err != nil || d < 0 { // -2: no key; -1 cannot happen, keys are set with a TTL
		return 0, err
	}
	return d, nil
}

// Cool makes endpoint cool down for d. A longer cooldown already set (by
// another instance told a longer Retry-After) is kept: the key is created
// if absent, and its TTL only ever raised (PEXPIRE GT, Redis 7).
func (c *Cooldowns) Cool(ctx context.Context, endpoint string, d time.Duration) error {
	k := c.key(endpoint)
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, k, 1, d)
		p.Do(ctx, "PEXPIRE", k, max(d.Milliseconds(), 1), "GT")
		return nil
	})
	return err
}
