// Package lease is the one lease mechanism of ragent's Redis-backed packages:
// token leases (a key holding an owner token, renewed and released only by
// that owner), the timer that renews any lease, and the Lua script layout.
// It imports only the stdlib and go-redis (archtest checks), so mechanisms
// and adapters may both import it.
package lease

import (
	"context"
	"embed"
	"io/fs"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/*.lua
	luaFiles      embed.FS
	renewScript   = Script(luaFiles, "renew.lua")
	releaseScript = Script(luaFiles, "release.lua")
)

// Script builds a script from the named files of fsys's lua/ directory in
// order: Redis has no includes, so a prelude is listed before its users.
// redis.Script.Run falls back from EVALSHA to EVAL, so a script cache flushed
// by a Redis restart costs one round trip, never an error.
func Script(fsys fs.ReadFileFS, files ...string) *redis.Script {
	var src []byte
	for _, f := range files {
		b, err := fsys.ReadFile("lua/" + f)
		if err != nil {
			panic("lease: missing embedded script " + f)
		}
		src = append(src, b...)
		src = append(src, '\n')
	}
	return redis.NewScript(string(src))
}

// Renew extends key to ttl while it holds token; false means the lease is
// lost (expired, perhaps taken by another owner).
func Renew(ctx context.Context, rdb redis.UniversalClient, key, token string, ttl time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, rdb, []string{key}, token, ttl.Milliseconds()).Int()
	return n == 1, err
}

// Release gives key back while it holds token: it deletes it, or with a
// guard > 0 lets it expire after guard. false means it was not ours any more.
func Release(ctx context.Context, rdb redis.UniversalClient, key, token string, guard time.Duration) (bool, error) {
	n, err := releaseScript.Run(ctx, rdb, []string{key}, token, guard.Milliseconds()).Int()
	return n == 1, err
}

// Renewer renews a lease on a timer, not a goroutine of its own: permits and
// locks are held for whole chat streams, and a thousand idle goroutine stacks
// would cost more memory than the streams.
type Renewer struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	cancel  context.CancelFunc
	running sync.WaitGroup // a renewal in progress
}

// Every calls renew after first, then each pause renew returns (counted from
// the call's start) until renew returns 0 or Stop. renew's context ends at
// Stop; ctx only carries values.
func Every(ctx context.Context, first time.Duration, renew func(ctx context.Context) time.Duration) *Renewer {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Renewer{cancel: cancel}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = time.AfterFunc(first, func() {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			return
		}
		r.running.Add(1)
		r.mu.Unlock()
		defer r.running.Done()
		start := time.Now()
		next := renew(ctx)
		r.mu.Lock()
		if !r.stopped && next > 0 {
			// The pause counts from the start of this renewal, like a
			// ticker's, so a slow Redis call does not push the next
			// renewal towards the lease's end.
			r.timer.Reset(max(next-time.Since(start), 0))
		}
		r.mu.Unlock()
	})
	return r
}

// Stop ends the renewals: it cancels a renewal in progress and waits for it,
// so none runs after the caller releases the lease. It is safe to call more
// than once.
func (r *Renewer) Stop() {
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	r.mu.Unlock()
	r.cancel()
	r.running.Wait()
}
