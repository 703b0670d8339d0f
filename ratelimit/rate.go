package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rate is a request-rate limit per key (per user), shared by every
// instance: at most Limit requests in any Window, refusals telling how long
// until the next one fits. It keeps one Redis key per recently active key
// (a timestamp that expires by itself); the decision is one Lua script on
// Redis TIME.
type Rate struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int
	window time.Duration
}

// NewRate returns a limit of limit requests per window under the keys
// prefix + "rate:" + name + ":" + key (empty prefix means "ragent:").
// A limit <= 0 admits everything.
func NewRate(rdb redis.UniversalClient, prefix, name string, limit int, window time.Duration) *Rate {
	if prefix == "" {
		prefix = "ragent:"
	}
	if window <= 0 {
		window = time.Minute
	}
	return &Rate{rdb: rdb, prefix: prefix + "rate:" + name + ":", limit: limit, window: window}
}

// Allow admits one request for key. It returns ok false and how long to
// wait when the key is over its limit, and ErrUnavailable when Redis fails
// (what to do then is the caller's policy).
func (r *Rate) Allow(ctx context.Context, key string) (ok bool, retryAfter time.Duration, err error) {
	return r.AllowLimit(ctx, key, r.limit)
}

// AllowLimit is Allow with a limit of the key's own (a widget key's
// per-origin and per-visitor rates), in the same window.
func (r *Rate) AllowLimit(ctx context.Context, key string, limit int) (ok bool, retryAfter time.Duration, err error) {
	if limit <= 0 {
		return true, 0, nil
	}
	v, err := rateScript.Run(ctx, r.rdb, []string{r.prefix + key}, limit, r.window.Milliseconds()).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(v) != 2 {
		return false, 0, fmt.Errorf("ratelimit: unexpected rate reply %v", v)
	}
	return v[0] == 1, time.Duration(v[1]) * time.Millisecond, nil
}
