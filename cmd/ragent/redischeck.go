package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// checkRedisEviction refuses to start on a Redis that may evict keys
// (maxmemory-policy other than noeviction): ragent keeps state there that
// must not vanish under memory pressure — login attempt counters (an
// eviction hands a guesser fresh attempts), Snowflake worker leases, the
// chat queue's permits, idempotency records. allow downgrades the refusal to
// a warning at every start. A Redis that cannot be asked (managed services
// that forbid CONFIG, or Redis away at start) is warned about and trusted:
// the operator must then set the policy themselves (docs/security.md "Security").
func checkRedisEviction(ctx context.Context, rdb redis.UniversalClient, allow bool, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	policy, ok := cfg["maxmemory-policy"]
	switch {
	case err != nil || !ok:
		log.Warn("cannot read Redis maxmemory-policy; it must be noeviction (docs/security.md)", "err", err)
		return nil
	case policy == "noeviction":
		return nil
	case allow:
		log.Error("Redis maxmemory-policy is "+policy+", not noeviction: under memory pressure Redis will drop "+
			"login attempt counters, worker leases and queue state (started anyway: RAGENT_REDIS_ALLOW_EVICTION)",
			"maxmemory_policy", policy)
		return nil
	}
	return fmt.Errorf("redis maxmemory-policy is %s: it must be noeviction, or Redis drops login attempt counters, "+
		"worker leases and queue state under memory pressure (CONFIG SET maxmemory-policy noeviction, "+
		"or RAGENT_REDIS_ALLOW_EVICTION=true to start anyway)", policy)
}
