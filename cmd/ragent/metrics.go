package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest"
)

// documentCounter counts the live documents by status.
type documentCounter interface {
	DocumentCounts(ctx context.Context) (map[service.DocumentStatus]int64, error)
}

// documentStatesMaxAge is how old the counts behind ragent_documents may
// be: their query scans the documents table, so a scrape reuses counts
// younger than this instead of querying again.
const documentStatesMaxAge = 15 * time.Second

// documentStates is the gauge ragent_documents{status}, counted at scrape
// time at most every documentStatesMaxAge.
type documentStates struct {
	store documentCounter
	log   *slog.Logger
	desc  *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	counts map[service.DocumentStatus]int64
}

var documentStatuses = []service.DocumentStatus{service.DocumentPending, service.DocumentRunning, service.DocumentReady, service.DocumentFailed}

func newDocumentStates(store documentCounter, log *slog.Logger) *documentStates {
	return &documentStates{store: store, log: log, desc: prometheus.NewDesc("ragent_documents",
		"Live documents by status (pending, running, ready, failed), counted at most every 15 s; every instance reports the same numbers.",
		[]string{"status"}, nil)}
}

func (d *documentStates) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *documentStates) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil || time.Since(d.at) > documentStatesMaxAge {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		counts, err := d.store.DocumentCounts(ctx)
		cancel()
		switch {
		case err == nil:
			d.counts, d.at = counts, time.Now()
		case d.counts == nil:
			// No series rather than a failed scrape: the rest of /metrics
			// matters most while a dependency is down.
			d.log.Warn("counting documents by status failed", "err", err)
			return
		default:
			d.log.Warn("counting documents by status failed; reporting the last counts", "err", err)
		}
	}
	for _, st := range documentStatuses {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(d.counts[st]), string(st))
	}
}

// backlogger is a consumer whose driver can tell its group's backlog (the
// Redis Streams driver; RocketMQ's Go client has no offset query).
type backlogger interface {
	Backlog(ctx context.Context) (mq.Backlog, error)
}

// backlogCollector asks each consumer for its backlog at scrape time (one
// XINFO GROUPS per consumer, bounded by a 2 s timeout).
type backlogCollector struct {
	consumers []backlogConsumer
	lag       *prometheus.Desc
	pending   *prometheus.Desc
}

type backlogConsumer struct {
	topic, group string
	b            backlogger
}

func newBacklogCollector() *backlogCollector {
	labels := []string{"topic", "group"}
	return &backlogCollector{
		lag:     prometheus.NewDesc("ragent_mq_lag", "Messages of the topic not yet delivered to the consumer group (Redis Streams driver).", labels, nil),
		pending: prometheus.NewDesc("ragent_mq_pending", "Messages delivered to the consumer group and not yet acknowledged (Redis Streams driver).", labels, nil),
	}
}

func (c *backlogCollector) add(topic, group string, consumer mq.Consumer) {
	if b, ok := consumer.(backlogger); ok {
		c.consumers = append(c.consumers, backlogConsumer{topic: topic, group: group, b: b})
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.pending
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, k := range c.consumers {
		b, err := k.b.Backlog(ctx)
		if err != nil {
			// Absent while Redis does not answer, rather than failing the
			// whole scrape.
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(b.Lag), k.topic, k.group)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.Pending), k.topic, k.group)
	}
}

// indexMetrics time the search engine's bulk writes and count their
// failures (an item the engine refused counts too). They are registered on
// every backend, so one dashboard fits both (0 on Postgres).
type indexMetrics struct {
	seconds *prometheus.HistogramVec // op
	errors  *prometheus.CounterVec   // op
}

func newIndexMetrics(reg prometheus.Registerer) *indexMetrics {
	m := &indexMetrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragent_opensearch_bulk_seconds",
			Help:    "Time of one bulk write to OpenSearch by operation (index: a document's chunks; delete: its stale chunks).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_opensearch_bulk_errors_total",
			Help: "Bulk writes to OpenSearch that failed (the request or one of its items), by operation.",
		}, []string{"op"}),
	}
	for _, op := range []string{"index", "delete"} {
		m.seconds.WithLabelValues(op)
		m.errors.WithLabelValues(op)
	}
	reg.MustRegister(m.seconds, m.errors)
	return m
}

// measuredIndex is a search index measured by indexMetrics.
type measuredIndex struct {
	next ingest.SearchIndex
	*indexMetrics
}

func (m *indexMetrics) observe(op string, start time.Time, err error) {
	m.seconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

func (m measuredIndex) Index(ctx context.Context, docs []service.SearchDoc) error {
	start := time.Now()
	err := m.next.Index(ctx, docs)
	m.observe("index", start, err)
	return err
}

func (m measuredIndex) DeleteDocument(ctx context.Context, docID service.ID, keep []service.ID) error {
	start := time.Now()
	err := m.next.DeleteDocument(ctx, docID, keep)
	m.observe("delete", start, err)
	return err
}

func (m measuredIndex) IndexSearchable(ctx context.Context, docs []service.SearchDoc) error {
	start := time.Now()
	err := m.next.IndexSearchable(ctx, docs)
	m.observe("index", start, err)
	return err
}

func (m measuredIndex) DeleteChunks(ctx context.Context, ids []service.ID) error {
	start := time.Now()
	err := m.next.DeleteChunks(ctx, ids)
	m.observe("delete", start, err)
	return err
}
