package idempotent

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed renew.lua
	renewSource string
	renewScript = redis.NewScript(renewSource)

	//go:embed release.lua
	releaseSource string
	releaseScript = redis.NewScript(releaseSource)
)

// newToken returns a random owner token; 128 bits make a collision between
// two owners of one key impossible in practice.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// watchdog keeps a lease (a key holding an owner token) alive by extending
// it to ttl every ttl/3, so a slow owner keeps it while a dead one loses it
// within one ttl. A renewal that fails on Redis is retried at the next tick:
// two more chances remain before the lease runs out.
//
// It runs on a timer rather than a goroutine of its own: a chat stream holds
// its submit lock for minutes, and a thousand idle goroutine stacks would
// cost more memory than the streams themselves.
type watchdog struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	cancel  context.CancelFunc
	running sync.WaitGroup // a renewal in progress
}

// startWatchdog renews key while it holds token. It stops by itself when the
// key is gone or holds another token, after calling lost. ctx only carries
// values: the watchdog lives until stop, not until ctx ends.
func startWatchdog(ctx context.Context, rdb redis.UniversalClient, key, token string, ttl time.Duration,
	lost func(), failed func(error)) *watchdog {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watchdog{cancel: cancel}
	interval := max(ttl/3, time.Millisecond)
	renew := func() {
		w.mu.Lock()
		if w.stopped {
			w.mu.Unlock()
			return
		}
		w.running.Add(1)
		w.mu.Unlock()
		defer w.running.Done()
		// A renewal still pending after a full ttl is moot: the lease has
		// run out by then.
		callCtx, callCancel := context.WithTimeout(ctx, ttl)
		n, err := renewScript.Run(callCtx, rdb, []string{key}, token, ttl.Milliseconds()).Int()
		callCancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failed(err)
		case n == 0:
			lost()
			return
		}
		w.mu.Lock()
		if !w.stopped {
			w.timer.Reset(interval)
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.timer = time.AfterFunc(interval, renew)
	w.mu.Unlock()
	return w
}

// stop ends the renewals and waits for one in progress, so no renewal runs
// after the caller releases the lease.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel()
	w.running.Wait()
}
