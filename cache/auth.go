package cache

import (
	"context"
	"embed"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// AuthState keeps the password-attempt counters in Redis:
// {prefix}auth:login:{<group>}<name>. A group (a hashed username, a client
// address, a device nonce, chosen by the auth use case) is a literal hash
// tag, so one script may check and count every counter of a group on Redis
// Cluster. Logged-out tokens are not kept here but in Postgres, so an
// evicted or lost key can never bring a logged-out token back.
type AuthState struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewAuthState returns an AuthState on rdb.
func NewAuthState(rdb redis.UniversalClient, prefix string) *AuthState {
	return &AuthState{rdb: rdb, prefix: prefix}
}

func (a *AuthState) keys(group string, names []string) []string {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = a.prefix + "auth:login:{" + group + "}" + n
	}
	return keys
}

//go:embed lua/*.lua
var luaFiles embed.FS

var (
	reserveScript = lease.Script(luaFiles, "login_reserve.lua")
	releaseScript = lease.Script(luaFiles, "login_release.lua")
)

// Reserve counts one attempt on each counter name of group unless one has
// reached its limit (limits[i] for names[i]), in one script, so parallel
// attempts cannot all pass a check made before counting. Each counter's
// window starts at its first attempt. It returns 0 when the attempt is
// counted, else how long until the full counter's window ends.
func (a *AuthState) Reserve(ctx context.Context, group string, names []string, limits []int, window time.Duration) (time.Duration, error) {
	args := make([]any, 0, len(limits)+1)
	for _, l := range limits {
		args = append(args, l)
	}
	args = append(args, strconv.FormatInt(window.Milliseconds(), 10))
	ms, err := reserveScript.Run(ctx, a.rdb, a.keys(group, names), args...).Int64()
	if err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Release gives back one reserved attempt on each counter name of group, or
// clears the counter where clear[i] is set.
func (a *AuthState) Release(ctx context.Context, group string, names []string, clear []bool) error {
	args := make([]any, len(clear))
	for i, c := range clear {
		args[i] = "0"
		if c {
			args[i] = "1"
		}
	}
	return releaseScript.Run(ctx, a.rdb, a.keys(group, names), args...).Err()
}
