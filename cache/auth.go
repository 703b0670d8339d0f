package cache

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// AuthState keeps logged-out token ids and failed-login counters in Redis
// under {prefix}auth:revoked:{tokenId} and {prefix}auth:login:{username}:{ip}.
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

func (a *AuthState) loginKey(username, ip string) string {
	return a.prefix + "auth:login:" + username + ":" + ip
}

// Fail counts a failed login; the window starts at the first failure.
func (a *AuthState) Fail(ctx context.Context, username, ip string, window time.Duration) (int, error) {
	key := a.loginKey(username, ip)
	pipe := a.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	pipe.ExpireNX(ctx, key, window)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return int(incr.Val()), nil
}

// Failures returns the failed logins in the current window.
func (a *AuthState) Failures(ctx context.Context, username, ip string) (int, error) {
	n, err := a.rdb.Get(ctx, a.loginKey(username, ip)).Int()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

// Reset clears the counter after a successful login.
func (a *AuthState) Reset(ctx context.Context, username, ip string) error {
	return a.rdb.Del(ctx, a.loginKey(username, ip)).Err()
}
