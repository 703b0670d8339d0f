package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Counter is one failure counter. Counters reserved or released in one call
// share Group, so the store can check and change them in one atomic step
// (one Redis Cluster hash slot); Name tells them apart within it. Groups and
// names are built from hashes and parsed addresses only, never from raw
// client input, so their length is bounded.
type Counter struct {
	Group string
	Name  string
	Limit int
	// Clear: a success clears the counter (its failures were the caller's
	// own: this device, or this account from this address). Otherwise a
	// success only gives its own attempt back, so failures others made stay
	// counted.
	Clear bool
}

// Attempts counts password attempts. An attempt is reserved before the
// password is checked and given back after a success, so parallel guesses
// cannot pass the check together before any of them is counted; the
// reservation of a failed attempt stays as its failure.
type Attempts interface {
	// Reserve counts one attempt on every counter (one Group), unless one of
	// them has reached its limit, in one atomic step. Each counter's window
	// starts at its first attempt. It returns 0 when the attempt is counted,
	// else how long until the full counter's window ends.
	Reserve(ctx context.Context, counters []Counter, window time.Duration) (retryAfter time.Duration, err error)
	// Release gives back the attempt reserved on each counter, or clears the
	// counter where its Clear is set.
	Release(ctx context.Context, counters []Counter) error
}

// maxLocalCounters bounds the in-process fallback's memory during a Redis
// outage: past it (after dropping expired counters) new attempts are refused.
const maxLocalCounters = 100_000

// localAttempts is the in-process fallback: the same counters, held by this
// instance alone, used while the shared store cannot be reached. An outage
// then costs an attacker at most one window's limits per instance, never an
// unlimited run of guesses.
type localAttempts struct {
	mu       sync.Mutex
	now      func() time.Time
	counters map[string]*localCounter
}

type localCounter struct {
	n     int
	until time.Time
}

func newLocalAttempts(now func() time.Time) *localAttempts {
	return &localAttempts{now: now, counters: map[string]*localCounter{}}
}

func localKey(c Counter) string { return c.Group + "\x00" + c.Name }

func (l *localAttempts) live(key string, now time.Time) *localCounter {
	c := l.counters[key]
	if c == nil || !now.Before(c.until) {
		return nil
	}
	return c
}

// Reserve is Attempts.Reserve; it never fails.
func (l *localAttempts) Reserve(_ context.Context, counters []Counter, window time.Duration) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var wait time.Duration
	for _, c := range counters {
		if lc := l.live(localKey(c), now); lc != nil && lc.n >= c.Limit {
			wait = max(wait, lc.until.Sub(now), time.Millisecond)
		}
	}
	if wait > 0 {
		return wait, nil
	}
	if len(l.counters)+len(counters) > maxLocalCounters {
		for k, lc := range l.counters {
			if !now.Before(lc.until) {
				delete(l.counters, k)
			}
		}
		if len(l.counters)+len(counters) > maxLocalCounters {
			return window, nil
		}
	}
	for _, c := range counters {
		k := localKey(c)
		lc := l.live(k, now)
		if lc == nil {
			lc = &localCounter{until: now.Add(window)}
			l.counters[k] = lc
		}
		lc.n++
	}
	return 0, nil
}

// Release is Attempts.Release; it never fails.
func (l *localAttempts) Release(_ context.Context, counters []Counter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, c := range counters {
		k := localKey(c)
		lc := l.live(k, now)
		switch {
		case lc == nil:
		case c.Clear || lc.n <= 1:
			delete(l.counters, k)
		default:
			lc.n--
		}
	}
	return nil
}

// failures reserves attempts on the shared counters and falls back to the
// in-process ones for any group the shared store cannot count.
type failures struct {
	shared Attempts
	local  *localAttempts
	window time.Duration
	log    *slog.Logger

	// warned is when the outage was last logged: once a minute, not once
	// per attempt.
	mu     sync.Mutex
	warned time.Time
}

// warn logs that the shared counters failed, at most once a minute.
func (f *failures) warn(ctx context.Context, err error) {
	now := f.local.now()
	f.mu.Lock()
	quiet := !f.warned.IsZero() && now.Sub(f.warned) < time.Minute
	if !quiet {
		f.warned = now
	}
	f.mu.Unlock()
	if !quiet {
		f.log.WarnContext(ctx, "attempt counters unavailable; counting in this instance", "err", err)
	}
}

// hold is one reserved group and the store that counted it.
type hold struct {
	store    Attempts
	counters []Counter
}

// reserve reserves one attempt on each group in turn. When a group is full
// the groups already reserved are given back and it returns how long the
// full one stays full.
func (f *failures) reserve(ctx context.Context, groups ...[]Counter) ([]hold, time.Duration) {
	held := make([]hold, 0, len(groups))
	for _, g := range groups {
		var store Attempts = f.shared
		wait, err := f.shared.Reserve(ctx, g, f.window)
		if err != nil {
			f.warn(ctx, err)
			store = f.local
			wait, _ = f.local.Reserve(ctx, g, f.window)
		}
		if wait > 0 {
			f.release(ctx, held, false)
			return nil, wait
		}
		held = append(held, hold{store: store, counters: g})
	}
	return held, 0
}

// release gives back the attempts held; success also clears the counters
// marked Clear (otherwise they only get the attempt back).
func (f *failures) release(ctx context.Context, held []hold, success bool) {
	for _, h := range held {
		counters := h.counters
		if !success {
			counters = make([]Counter, len(h.counters))
			for i, c := range h.counters {
				c.Clear = false
				counters[i] = c
			}
		}
		if err := h.store.Release(ctx, counters); err != nil {
			f.warn(ctx, err)
		}
	}
}

// busy is the refusal of an attempt past a limit: service.ErrBusy with the
// wait as RetryAfter and, in whole seconds, as its retryAfter detail.
func busy(wait time.Duration, message string) error {
	secs := int64((wait + time.Second - 1) / time.Second)
	return &service.Error{Kind: service.ErrBusy, Message: message, RetryAfter: wait,
		Details: map[string]string{"retryAfter": strconv.FormatInt(secs, 10)}}
}

// usernameKey is the counters' name for a username: a hash of its lower
// case, so a key's length never depends on what a client sent.
func usernameKey(username string) string {
	sum := sha256.Sum256([]byte(strings.ToLower(username)))
	return hex.EncodeToString(sum[:16])
}

// clientKey is the counters' name for a client address: the address itself,
// or its /64 for IPv6, since one IPv6 client holds a whole /64. An address
// that does not parse (none in production: it comes from the trusted-proxy
// logic) is hashed.
func clientKey(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		sum := sha256.Sum256([]byte(ip))
		return "x" + hex.EncodeToString(sum[:8])
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}
