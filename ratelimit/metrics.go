package ratelimit

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Rejection reasons, the values of the reason label of
// ratelimit_rejections_total.
const (
	reasonTimeout       = "timeout"
	reasonQueueFull     = "queue_full"
	reasonUserQueueFull = "user_queue_full"
	reasonUnavailable   = "unavailable"
)

// metrics is one limiter's (or semaphore's) collector. Every series carries
// a constant limiter=<name> label, so the chat limiter and the upload
// semaphore can share a registry without clashing.
type metrics struct {
	permitsInUse prometheus.Gauge
	queueLength  prometheus.Gauge
	waitSeconds  prometheus.Histogram
	handoff      prometheus.Histogram
	rejections   *prometheus.CounterVec
	redisErrors  prometheus.Counter
	fallbacks    prometheus.Counter
}

func newMetrics(name string) *metrics {
	// Every metric carries the limiter's name, so several limiters share
	// one registry.
	labels := prometheus.Labels{"limiter": name}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, ConstLabels: labels, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, ConstLabels: labels, Help: help})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, ConstLabels: labels, Help: help, Buckets: buckets})
	}
	m := &metrics{
		permitsInUse: gauge("ratelimit_permits_in_use", "Permits held across all instances, as last seen by this instance."),
		queueLength:  gauge("ratelimit_queue_length", "Requests waiting in the shared queue, as last seen by this instance."),
		waitSeconds: histogram("ratelimit_wait_seconds", "Time from Acquire to a granted permit.",
			prometheus.ExponentialBuckets(0.001, 2, 15)),
		handoff: histogram("ratelimit_handoff_seconds", "Time from a release notification to the woken waiter's grant (Redis clock).",
			prometheus.ExponentialBuckets(0.0001, 2, 14)),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_rejections_total", ConstLabels: labels,
			Help: "Acquires refused, by reason (timeout, queue_full, user_queue_full, unavailable).",
		}, []string{"reason"}),
		redisErrors: counter("ratelimit_redis_errors_total", "Redis calls that failed."),
		fallbacks:   counter("ratelimit_redis_fallback_total", "Acquires served by the in-process semaphore because Redis failed."),
	}
	for _, r := range []string{reasonTimeout, reasonQueueFull, reasonUserQueueFull, reasonUnavailable} {
		m.rejections.WithLabelValues(r)
	}
	return m
}

// registerMetrics returns the collector for name registered on reg. A second
// limiter with the same name on the same registerer shares the first one's
// collector, so building limiters repeatedly (tests, restarts) never fails.
// A nil reg leaves the metrics unregistered.
func registerMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	m := newMetrics(name)
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*metrics); ok {
				return existing, nil
			}
		}
		return m, err
	}
	return m, nil
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.permitsInUse, m.queueLength, m.waitSeconds, m.handoff,
		m.rejections, m.redisErrors, m.fallbacks}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}
