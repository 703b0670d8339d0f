// Package lease is the one lease mechanism of ragent's Redis-backed packages
// (ratelimit, idempotent, idgen): token leases (a key holding an owner token,
// renewed and released only by that owner), the timer that renews any lease,
// and the layout of Lua scripts. It imports only the standard library and
// go-redis and knows no domain; internal/archtest keeps it so, which is what
// lets mechanisms and adapters both import it.
package lease

import (
	"context"
	"embed"
	"io/fs"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

var (
	renewScript   = Script(luaFiles, "renew.lua")
	releaseScript = Script(luaFiles, "release.lua")
)

// Script builds a script from the named files of fsys's lua/ directory,
// concatenated in order: Redis has no includes, so a shared prelude (a
// package's clock.lua or lib.lua) is listed before the script that uses it.
// Every package keeps its scripts as lua/*.lua embedded into an embed.FS
// and builds them with Script. redis.Script.Run tries EVALSHA first and falls
// back to EVAL, so a script cache flushed by a Redis restart costs one extra
// round trip, never an error.
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

// Renewer calls a renewal function on a timer until Stop. It runs on a timer
// rather than a goroutine of its own: a permit or a submit lock is held for a
// whole chat stream, and a thousand idle goroutine stacks would cost more
// memory than the streams themselves.
type Renewer struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	cancel  context.CancelFunc
	running sync.WaitGroup // a renewal in progress
}

// Every calls renew after first, then again each pause renew returns after
// the start of the call, until renew returns 0 or Stop is called. renew's context ends at Stop; ctx
// only carries values: the renewals live until Stop, not until ctx ends.
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
