package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pause is a "hold off until" shared by every instance: one key whose TTL is
// the time left. An upstream that answers 429 with Retry-After pauses the
// work that would only be refused too (document embeddings), everywhere at
// once, instead of every instance finding out with its own refused call.
type Pause struct {
	rdb redis.UniversalClient
	key string
}

// NewPause returns the pause named name; its key is
// {prefix}{limiter:name}:pause (empty prefix means "ragent:"), in the hash
// tag of the limiter of the same name.
func NewPause(rdb redis.UniversalClient, prefix, name string) *Pause {
	if prefix == "" {
		prefix = "ragent:"
	}
	return &Pause{rdb: rdb, key: prefix + "{limiter:" + name + "}:pause"}
}

// Extend makes the pause last at least d from now; a longer pause already
// set is kept.
func (p *Pause) Extend(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := pauseScript.Run(ctx, p.rdb, []string{p.key}, max(d.Milliseconds(), 1)).Err(); err != nil {
		return fmt.Errorf("ratelimit: pause: %w", err)
	}
	return nil
}

// Left returns how long the pause lasts still (0 when there is none).
func (p *Pause) Left(ctx context.Context) (time.Duration, error) {
	d, err := p.rdb.PTTL(ctx, p.key).Result()
	if err != nil {
		return 0, fmt.Errorf("ratelimit: pause: %w", err)
	}
	return max(d, 0), nil
}

// pauseRecheck bounds how long Wait sleeps before reading the pause again,
// so a pause lifted early (its key deleted by an operator) ends the wait.
const pauseRecheck = time.Second

// Wait returns once the pause is over (at once when there is none), or with
// ctx's error. A Redis failure ends the wait with the error: the caller
// decides whether to go ahead.
func (p *Pause) Wait(ctx context.Context) error {
	for {
		left, err := p.Left(ctx)
		if err != nil || left <= 0 {
			return err
		}
		t := time.NewTimer(min(left, pauseRecheck))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
