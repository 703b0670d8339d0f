package cache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/service"
)

// QuotaCounters are the shared quota counters: one hash per subject and
// period, {prefix}quota:{subject}:{id}:{day|month}:{label}, with the fields
// requests, tokens and seeded, expiring after its period; and
// {prefix}quota:version, raised on every quota change. Each script touches
// one key, so they run unchanged on Redis Cluster; a check sends them in
// one pipeline (one round trip), as EVAL: a pipeline cannot fall back
// from EVALSHA to EVAL on a script cache miss.
type QuotaCounters struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewQuotaCounters returns the counters on rdb.
func NewQuotaCounters(rdb redis.UniversalClient, prefix string) *QuotaCounters {
	return &QuotaCounters{rdb: rdb, prefix: prefix}
}

var (
	//go:embed quota_admit.lua
	quotaAdmitLua string
	//go:embed quota_seed.lua
	quotaSeedLua string
	//go:embed quota_tokens.lua
	quotaTokensLua string

	quotaAdmit  = redis.NewScript(quotaAdmitLua)
	quotaSeed   = redis.NewScript(quotaSeedLua)
	quotaTokens = redis.NewScript(quotaTokensLua)
)

func (c *QuotaCounters) key(k service.QuotaCounter) string {
	return fmt.Sprintf("%squota:%s:%d:%s:%s", c.prefix, k.Subject, k.ID, k.Period, k.Label)
}

func (c *QuotaCounters) versionKey() string { return c.prefix + "quota:version" }

// Admit counts one request on each counter and reads the quotas' version.
func (c *QuotaCounters) Admit(ctx context.Context, keys []service.QuotaCounter) (int64, []service.QuotaCount, error) {
	if len(keys) == 0 {
		v, err := c.rdb.Get(ctx, c.versionKey()).Int64()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return v, nil, err
	}
	pipe := c.rdb.Pipeline()
	version := pipe.Get(ctx, c.versionKey())
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = quotaAdmit.Eval(ctx, pipe, []string{c.key(k)}, k.TTL.Milliseconds())
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, err
	}
	v, err := version.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, err
	}
	counts := make([]service.QuotaCount, len(keys))
	for i, cmd := range cmds {
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) != 3 {
			return 0, nil, fmt.Errorf("quota counter: %v %w", vals, err)
		}
		counts[i] = service.QuotaCount{Requests: vals[0], Tokens: vals[1], Seeded: vals[2] == 1}
	}
	return v, counts, nil
}

// Release takes back the request Admit counted.
func (c *QuotaCounters) Release(ctx context.Context, keys []service.QuotaCounter) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.HIncrBy(ctx, c.key(k), "requests", -1)
		}
		return nil
	})
	return err
}

// Seed adds stored usage to a counter not yet seeded.
func (c *QuotaCounters) Seed(ctx context.Context, k service.QuotaCounter, tokens, requests int64) (service.QuotaCount, error) {
	vals, err := quotaSeed.Run(ctx, c.rdb, []string{c.key(k)}, tokens, requests, k.TTL.Milliseconds()).Int64Slice()
	if err != nil || len(vals) != 2 {
		return service.QuotaCount{}, fmt.Errorf("seeding a quota counter: %v %w", vals, err)
	}
	return service.QuotaCount{Requests: vals[0], Tokens: vals[1], Seeded: true}, nil
}

// AddTokens adds tokens to the seeded counters among adds.
func (c *QuotaCounters) AddTokens(ctx context.Context, adds map[service.QuotaCounter]int64) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, n := range adds {
			quotaTokens.Eval(ctx, p, []string{c.key(k)}, n)
		}
		return nil
	})
	return err
}

// BumpVersion raises the quotas' version.
func (c *QuotaCounters) BumpVersion(ctx context.Context) error {
	return c.rdb.Incr(ctx, c.versionKey()).Err()
}
