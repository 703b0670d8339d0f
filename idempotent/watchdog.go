package idempotent

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
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
type watchdog struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startWatchdog renews key while it holds token. It stops by itself when the
// key is gone or holds another token, after calling lost. ctx only carries
// values: the watchdog lives until stop, not until ctx ends.
func startWatchdog(ctx context.Context, rdb redis.UniversalClient, key, token string, ttl time.Duration,
	lost func(), failed func(error)) *watchdog {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watchdog{cancel: cancel, done: make(chan struct{})}
	interval := max(ttl/3, time.Millisecond)
	go func() {
		defer close(w.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			// A renewal still pending after a full ttl is moot: the lease
			// has run out by then.
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
		}
	}()
	return w
}

// stop ends the renewals and waits for the goroutine, so no renewal runs
// after the caller releases the lease.
func (w *watchdog) stop() {
	w.cancel()
	<-w.done
}
