package idempotent

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// Locks hands out submit locks: one holder per key across all instances.
type Locks struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	opt    options
}

// NewLocks returns Locks keeping their keys under prefix, whose locks
// expire ttl after the last renewal.
// While a lock is held its watchdog renews it every ttl/3, so ttl bounds how
// long a crashed holder blocks duplicates, not how long a request may run.
// ttl must be at least a millisecond (Redis PX granularity).
func NewLocks(rdb redis.UniversalClient, prefix string, ttl time.Duration, cfg Config) *Locks {
	mustTTLs("lock", ttl)
	return &Locks{rdb: rdb, prefix: prefix, ttl: ttl, opt: newOptions(cfg)}
}

// AcquireSubmit takes the submit lock of a request, keyed by SubmitKey
// under the Locks' prefix (see Acquire).
func (l *Locks) AcquireSubmit(ctx context.Context, path, userID string, body []byte) (*Lock, error) {
	return l.Acquire(ctx, SubmitKey(l.prefix, path, userID, body))
}

// SubmitKey returns the submit-lock key of a request:
// {prefix}idem:submit:{path}:{userID}:{md5 of Canonical(body)}.
// The body is canonicalised here, so two JSON bodies that differ only in key
// order or whitespace share a key; path should be the route pattern or the
// request path, whichever identifies "the same submit" for the caller.
func SubmitKey(prefix, path, userID string, body []byte) string {
	sum := md5.Sum(Canonical(body))
	return prefix + "idem:submit:" + path + ":" + userID + ":" + hex.EncodeToString(sum[:])
}

// Acquire takes the lock on key (a full Redis key, e.g. from SubmitKey) and
// starts its watchdog. It returns ErrLocked when another holder has it and
// an error wrapping ErrUnavailable when Redis fails; the caller must Release
// a returned lock.
func (l *Locks) Acquire(ctx context.Context, key string) (*Lock, error) {
	token := newToken()
	ok, err := l.rdb.SetNX(ctx, key, token, l.ttl).Result()
	if err != nil {
		return nil, l.opt.redisError(ctx, componentLock, "acquire "+key, err)
	}
	if !ok {
		l.opt.metrics.lockConflicts.Inc()
		return nil, ErrLocked
	}
	l.opt.metrics.locksAcquired.Inc()
	lock := &Lock{locks: l, key: key, token: token}
	lock.watchdog = l.opt.startWatchdog(ctx, l.rdb, key, token, l.ttl,
		componentLock, "submit lock", "before release; a duplicate may run")
	return lock, nil
}

// Lock is a held submit lock.
type Lock struct {
	locks    *Locks
	key      string
	token    string
	watchdog *lease.Renewer
}

// Key returns the Redis key the lock holds.
func (lk *Lock) Key() string { return lk.key }

// Release stops the watchdog and deletes the lock if it still holds this
// lock's token. It returns ErrNotOwner when the lock had expired (and maybe
// been taken by another request), and an error wrapping ErrUnavailable when
// Redis fails. A lock whose release failed on Redis would refuse every retry
// of its request with ErrLocked until it expires, a whole ttl after the
// request failed: so the release is retried in the background, with backoff,
// until it lands or the lock has run out, and a retry gets through as soon
// as Redis answers again. Pass a context that outlives the request
// (context.WithoutCancel) so a client that hung up does not leave the lock
// to expire.
func (lk *Lock) Release(ctx context.Context) error {
	lk.watchdog.Stop()
	// The lock runs out at most a ttl after its last renewal, which was
	// before this call.
	expires := time.Now().Add(lk.locks.ttl)
	err := lk.release(ctx)
	if errors.Is(err, ErrUnavailable) {
		go lk.retryRelease(context.WithoutCancel(ctx), expires)
	}
	return err
}

func (lk *Lock) release(ctx context.Context) error {
	released, err := lease.Release(ctx, lk.locks.rdb, lk.key, lk.token, 0)
	if err != nil {
		return lk.locks.opt.redisError(ctx, componentLock, "release "+lk.key, err)
	}
	if !released {
		return fmt.Errorf("idempotent: release %s: %w", lk.key, ErrNotOwner)
	}
	return nil
}

// Bounds of the pause between two tries of a failed release.
const (
	minReleaseBackoff = 50 * time.Millisecond
	maxReleaseBackoff = time.Second
)

// retryRelease tries the compare-and-delete again until it lands, the lock
// turns out not to be ours, or it expires: the token check keeps a late
// try from deleting a lock another request took meanwhile.
func (lk *Lock) retryRelease(ctx context.Context, expires time.Time) {
	pause := minReleaseBackoff
	for {
		left := time.Until(expires)
		if left <= 0 {
			return
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxReleaseBackoff)
		callCtx, cancel := context.WithTimeout(ctx, min(maxReleaseBackoff, max(time.Until(expires), time.Millisecond)))
		err := lk.release(callCtx)
		cancel()
		if !errors.Is(err, ErrUnavailable) {
			if err == nil {
				lk.locks.opt.metrics.lateReleases.Inc()
				lk.locks.opt.log.InfoContext(ctx, "idempotent: submit lock released after Redis recovered", "key", lk.key)
			}
			return
		}
	}
}
