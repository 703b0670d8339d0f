// Package idempotent keeps repeated work from running twice, on Redis.
//
// It provides three mechanisms (DESIGN §8.3, §10), each usable on its own:
//
//   - Locks: a submit lock per (path, user, canonical body) taken with
//     SET NX PX and an owner token, renewed by a watchdog while the request
//     runs and released by compare-and-delete, so an identical request that
//     arrives while the first is in flight can be refused.
//   - Responses: the Idempotency-Key store. The first request with a key owns
//     it; its completed response is kept for 24 h and replayed to later
//     requests with the same key and payload.
//   - Guard: the MQ consume guard (SET NX GET PX) that processes a message
//     once even when the queue delivers it several times.
//
// The package is a mechanism: it knows Redis and Prometheus, not HTTP
// frameworks or ragent's domain. Redis failures never silently block work:
// Locks and Responses return errors wrapping ErrUnavailable so the caller
// can serve the request anyway (DESIGN §11: the database unique keys are the
// last line), and Guard processes the message anyway and reports it.
package idempotent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrUnavailable wraps every Redis failure of Locks and Responses. The
	// caller should serve the request without the guarantee and log it.
	ErrUnavailable = errors.New("idempotency store unavailable")

	// ErrLocked means another request holds the submit lock.
	ErrLocked = errors.New("submit lock held by another request")

	// ErrNotOwner means a lock or Idempotency-Key is no longer held by the
	// caller (it expired, or another request took it over), so the release,
	// completion or abort changed nothing.
	ErrNotOwner = errors.New("not the owner")

	// ErrInFlight means another consumer is processing the same message; the
	// MQ should redeliver it later.
	ErrInFlight = errors.New("message is being consumed elsewhere")

	// ErrInvalidKey means an Idempotency-Key is empty or longer than MaxKeyLen.
	ErrInvalidKey = errors.New("invalid idempotency key")
)

// Config is what Locks, Responses and Guard take besides their TTLs. The
// zero Config discards logs and keeps the counters unregistered.
type Config struct {
	// Logger gets the events no caller sees: lost leases and Redis errors
	// the consume guard absorbs.
	Logger *slog.Logger
	// Registerer registers the package's Prometheus counters. Several Locks,
	// Responses and Guards may share one registerer; they then share the
	// counters.
	Registerer prometheus.Registerer
}

type options struct {
	log     *slog.Logger
	metrics *metrics
}

// mustTTLs panics on a ttl below a millisecond (Redis PX granularity): a
// caller's programming error, not a condition to handle.
func mustTTLs(what string, ttls ...time.Duration) {
	for _, ttl := range ttls {
		if ttl < time.Millisecond {
			panic(fmt.Sprintf("idempotent: %s ttl %v is below 1ms", what, ttl))
		}
	}
}

func newOptions(cfg Config) options {
	o := options{log: cfg.Logger, metrics: newMetrics(cfg.Registerer)}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	return o
}

// redisError turns a Redis failure into an error wrapping ErrUnavailable and
// counts it. A failure caused by the caller's own context ending is not a
// Redis outage, so it is returned as the context's error and not counted.
func (o *options) redisError(ctx context.Context, component, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("idempotent: %s: %w", op, ctxErr)
	}
	o.metrics.redisErrors.WithLabelValues(component).Inc()
	return fmt.Errorf("idempotent: %s: %w: %w", op, ErrUnavailable, err)
}
