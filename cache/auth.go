package cache

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// AuthState keeps logged-out token ids and login attempt counters in Redis:
// {prefix}auth:revoked:{tokenId}, and per username {prefix}auth:login:{<username>}
// beside per username and address {prefix}auth:login:{<username>}:{ip}. The
// username is a literal hash tag, so one script may touch both counters on
// Redis Cluster.
type AuthState struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewAuthState returns an AuthState on rdb.
func NewAuthState(rdb redis.UniversalClient, prefix string) *AuthState {
	return &AuthState{rdb: rdb, prefix: prefix}
}

// Revoke records tokenID as logged out for ttl (the token's remaining life).
func (a *AuthState) Revoke(ctx context.Context, tokenID string, ttl time.Duration) error {
	return a.rdb.Set(ctx, a.prefix+"auth:revoked:"+tokenID, 1, ttl).Err()
}

// Revoked reports whether tokenID was logged out.
func (a *AuthState) Revoked(ctx context.Context, tokenID string) (bool, error) {
	n, err := a.rdb.Exists(ctx, a.prefix+"auth:revoked:"+tokenID).Result()
	return n > 0, err
}

// loginKeys returns the per-username and the per-username-and-address
// counter keys.
func (a *AuthState) loginKeys(username, ip string) []string {
	user := a.prefix + "auth:login:{" + username + "}"
	return []string{user, user + ":" + ip}
}

var (
	//go:embed login_reserve.lua
	reserveSource string
	reserveScript = redis.NewScript(reserveSource)

	//go:embed login_reset.lua
	resetSource string
	resetScript = redis.NewScript(resetSource)
)

// Reserve counts one attempt on both counters unless either has reached its
// limit (perUser for the username from any address, perIP for the username
// from ip), in one script, so parallel attempts cannot all pass a check made
// before counting. Each counter's window starts at its first attempt. It
// returns 0 when the attempt is counted, else how long until the full
// counter's window ends.
func (a *AuthState) Reserve(ctx context.Context, username, ip string, perUser, perIP int, window time.Duration) (time.Duration, error) {
	ms, err := reserveScript.Run(ctx, a.rdb, a.loginKeys(username, ip),
		perUser, perIP, strconv.FormatInt(window.Milliseconds(), 10)).Int64()
	if err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Reset clears the per-address counter and gives back the successful
// attempt on the per-username one; the failures others made from elsewhere
// stay counted.
func (a *AuthState) Reset(ctx context.Context, username, ip string) error {
	return resetScript.Run(ctx, a.rdb, a.loginKeys(username, ip)).Err()
}
