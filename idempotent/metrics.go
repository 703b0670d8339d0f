package idempotent

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of the component label.
const (
	componentLock    = "lock"
	componentKey     = "key"
	componentConsume = "consume"
)

type metrics struct {
	locksAcquired prometheus.Counter
	lockConflicts prometheus.Counter
	// lateReleases counts submit locks released by a background retry
	// after their release first failed on Redis.
	lateReleases prometheus.Counter
	// leasesLost counts watchdogs that found their key gone or taken over:
	// the work outlived its lease, so a duplicate may have run beside it.
	leasesLost  *prometheus.CounterVec // component
	keyOutcomes *prometheus.CounterVec // outcome
	consumed    *prometheus.CounterVec // result
	redisErrors *prometheus.CounterVec // component
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: name, Help: help}))
	}
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: name, Help: help}, []string{label}))
	}
	return &metrics{
		locksAcquired: counter("locks_acquired_total", "Submit locks acquired."),
		lockConflicts: counter("lock_conflicts_total", "Submit lock attempts refused because another request held the lock."),
		lateReleases:  counter("late_releases_total", "Submit locks released by a retry after their release failed on Redis."),
		leasesLost: counterVec("leases_lost_total",
			"Watchdogs that found their lock or consume marker expired or taken over.", "component"),
		keyOutcomes: counterVec("key_outcomes_total",
			"Idempotency-Key lookups by outcome (proceed, replay, mismatch, in_flight).", "outcome"),
		consumed: counterVec("consume_total",
			"Consume guard decisions (processed, failed, duplicate, in_flight, degraded).", "result"),
		redisErrors: counterVec("redis_errors_total",
			"Redis errors by component (lock, key, consume); the work went ahead without the guarantee.", "component"),
	}
}

// register registers c with reg, or returns the collector already registered
// under the same name so that several users of the package share counters.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
