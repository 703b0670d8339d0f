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
	// leasesLost counts watchdogs that found their key gone or taken over:
	// the work outlived its lease, so a duplicate may have run beside it.
	leasesLost  *prometheus.CounterVec // component
	keyOutcomes *prometheus.CounterVec // outcome
	consumed    *prometheus.CounterVec // result
	redisErrors *prometheus.CounterVec // component
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		locksAcquired: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: "locks_acquired_total",
			Help: "Submit locks acquired.",
		})),
		lockConflicts: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: "lock_conflicts_total",
			Help: "Submit lock attempts refused because another request held the lock.",
		})),
		leasesLost: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: "leases_lost_total",
			Help: "Watchdogs that found their lock or consume marker expired or taken over.",
		}, []string{"component"})),
		keyOutcomes: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: "key_outcomes_total",
			Help: "Idempotency-Key lookups by outcome (proceed, replay, mismatch, in_flight).",
		}, []string{"outcome"})),
		consumed: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: "consume_total",
			Help: "Consume guard decisions (processed, failed, duplicate, in_flight, degraded).",
		}, []string{"result"})),
		redisErrors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "idempotent", Name: "redis_errors_total",
			Help: "Redis errors by component (lock, key, consume); the work went ahead without the guarantee.",
		}, []string{"component"})),
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
