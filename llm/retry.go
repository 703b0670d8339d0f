package llm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter caps how long a Retry-After may make us wait. A provider
// asking for minutes is better reported at once: a chat holds a permit of
// the fair queue while it waits.
const maxRetryAfter = 30 * time.Second

// statusError is a non-2xx answer from a provider.
type statusError struct {
	code       int
	retryAfter time.Duration // 0 when the header was absent
	body       string        // the start of the body, for the log
}

func (e *statusError) Error() string {
	if e.body == "" {
		return fmt.Sprintf("upstream status %d", e.code)
	}
	return fmt.Sprintf("upstream status %d: %s", e.code, e.body)
}

// retryable reports whether the same request may succeed later: rate limits,
// server errors and request timeouts. Other 4xx answers will not change.
func (e *statusError) retryable() bool {
	return e.code == http.StatusTooManyRequests || e.code == http.StatusRequestTimeout || e.code >= 500
}

// readStatusError builds a statusError from resp and closes its body.
func readStatusError(resp *http.Response, now time.Time) *statusError {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &statusError{
		code:       resp.StatusCode,
		retryAfter: cmp.Or(parseRetryAfter(resp.Header.Get("Retry-After"), now), rateLimitReset(resp.Header)),
		body:       strings.TrimSpace(string(body)),
	}
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 §10.2.3). It returns 0 when the header is absent or malformed.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// rateLimitReset reads OpenAI's x-ratelimit-* headers: when the requests
// or tokens remaining are 0, how long until that limit resets ("1s",
// "6m0s", "20ms"); 0 when neither is spent or the headers are absent.
func rateLimitReset(h http.Header) time.Duration {
	var d time.Duration
	for _, dim := range []string{"requests", "tokens"} {
		if strings.TrimSpace(h.Get("X-Ratelimit-Remaining-"+dim)) != "0" {
			continue
		}
		if r, err := time.ParseDuration(strings.TrimSpace(h.Get("X-Ratelimit-Reset-" + dim))); err == nil {
			d = max(d, r)
		}
	}
	return d
}

// retrier decides whether and how long to wait before another attempt.
type retrier struct {
	max  int
	base time.Duration
	cap  time.Duration
	now  func() time.Time
}

func newRetrier(maxRetries int, o options) retrier {
	return retrier{max: maxRetries, base: o.backoffBase, cap: o.backoffMax, now: o.now}
}

// delay returns the wait before retry number attempt (0-based) after err,
// and false when err must not be retried or the retries are spent.
func (r retrier) delay(attempt int, err error) (time.Duration, bool) {
	if attempt >= r.max {
		return 0, false
	}
	var se *statusError
	if errors.As(err, &se) {
		if !se.retryable() {
			return 0, false
		}
		if se.retryAfter > maxRetryAfter {
			return 0, false
		}
		if se.retryAfter > 0 {
			// A little jitter so that clients told the same date do not
			// return in lockstep; never earlier than asked.
			return se.retryAfter + rand.N(se.retryAfter/10+1), true // at most a tenth more
		}
	} else if !isConnError(err) {
		return 0, false
	}
	// Exponential backoff with "equal jitter": half fixed, half random.
	d := r.base << attempt
	if d > r.cap || d <= 0 {
		d = r.cap
	}
	return d/2 + rand.N(d/2+1), true
}

// isConnError reports transport failures worth another try: refused or
// reset connections, a body cut short, an attempt that timed out. Callers
// wrap an error in connError only while the caller's context is alive, so a
// cancellation is never retried.
func isConnError(err error) bool {
	var ce *connError
	return errors.As(err, &ce)
}

// connError marks an error of the transport (dial, write, read) as opposed
// to one of the protocol (bad JSON, a 400).
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// do runs call until it succeeds, fails for good, or the retries are spent.
// call reports whether the error it returns may be retried at all (a chat
// stream that already emitted a delta may not).
func (r retrier) do(ctx context.Context, call func() (retryable bool, err error)) error {
	for attempt := 0; ; attempt++ {
		retryable, err := call()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable {
			return err
		}
		d, ok := r.delay(attempt, err)
		if !ok {
			if attempt > 0 {
				return fmt.Errorf("after %d retries: %w", attempt, err)
			}
			return err
		}
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}
