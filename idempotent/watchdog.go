package idempotent

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// The package's scripts, laid out as every package's (see internal/lease).
var (
	//go:embed lua/*.lua
	luaFiles           embed.FS
	consumeBeginScript = lease.Script(luaFiles, "consume_begin.lua")
	keyBeginScript     = lease.Script(luaFiles, "key_begin.lua")
	keyCompleteScript  = lease.Script(luaFiles, "key_complete.lua")
	keyAbortScript     = lease.Script(luaFiles, "key_abort.lua")
)

// newToken returns a random owner token; 128 bits make a collision between
// two owners of one key impossible in practice.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// startWatchdog keeps a lease (key holding token) alive by extending it to
// ttl every ttl/3, so a slow owner keeps it while a dead one loses it within
// one ttl. A renewal that fails on Redis is retried at the next turn: two
// more chances remain before the lease runs out. It stops by itself when the
// key is gone or holds another token, after reporting the loss (what it is
// and the consequence, for the log; counted for component); otherwise at Stop.
func (o *options) startWatchdog(ctx context.Context, rdb redis.UniversalClient, key, token string, ttl time.Duration,
	component, what, consequence string) *lease.Renewer {
	interval := max(ttl/3, time.Millisecond)
	return lease.Every(ctx, interval, func(ctx context.Context) time.Duration {
		// A renewal still pending after a full ttl is moot: the lease has
		// run out by then.
		callCtx, cancel := context.WithTimeout(ctx, ttl)
		held, err := lease.Renew(callCtx, rdb, key, token, ttl)
		cancel()
		switch {
		case ctx.Err() != nil:
			return 0
		case err != nil:
			o.metrics.redisErrors.WithLabelValues(component).Inc()
			o.log.WarnContext(ctx, "idempotent: "+what+" renewal failed", "key", key, "err", err)
		case !held:
			o.metrics.leasesLost.WithLabelValues(component).Inc()
			o.log.WarnContext(ctx, "idempotent: "+what+" lost "+consequence, "key", key)
			return 0
		}
		return interval
	})
}
