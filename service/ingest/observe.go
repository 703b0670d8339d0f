package ingest

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Stages of a document's ingestion: each is a span of the document's trace
// and a series of ragent_ingest_stage_seconds.
const (
	stageParse = "parse"
	stageChunk = "chunk"
	stageEmbed = "embed"
	stageIndex = "index"
)

// metrics are the pipeline's own measurements; the queue's and the
// embedder's are their adapters'.
type metrics struct {
	stageSeconds *prometheus.HistogramVec // stage
	chunks       prometheus.Counter
	documents    *prometheus.CounterVec   // outcome
	requests     *prometheus.CounterVec   // client (fetch, webhook), outcome
	requestSecs  *prometheus.HistogramVec // client
}

// Outcomes of ragent_ingest_documents_total.
const (
	outcomeReady  = "ready"
	outcomeFailed = "failed"
	outcomeRetry  = "retry"
	outcomeStale  = "stale"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		stageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ragent", Subsystem: "ingest", Name: "stage_seconds",
			Help:    "Time per ingestion stage of one document (parse, chunk, embed, index).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"stage"}),
		chunks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "ingest", Name: "chunks_indexed_total",
			Help: "Chunks stored by ingestion (rate() is chunks per second).",
		}),
		documents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Subsystem: "ingest", Name: "documents_total",
			Help: "Ingestion attempts of a document by outcome (ready, failed, retry, stale).",
		}, []string{"outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ragent", Name: "outbound_requests_total",
			Help: "HTTP requests of URL imports (client=fetch) and webhook deliveries (client=webhook), by outcome (2xx, 3xx, 4xx, 5xx, error).",
		}, []string{"client", "outcome"}),
		requestSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ragent", Name: "outbound_request_seconds",
			Help:    "Time to the response headers of URL-import and webhook requests, by client.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10),
		}, []string{"client"}),
	}
	for _, st := range []string{stageParse, stageChunk, stageEmbed, stageIndex} {
		m.stageSeconds.WithLabelValues(st)
	}
	for _, o := range []string{outcomeReady, outcomeFailed, outcomeRetry, outcomeStale} {
		m.documents.WithLabelValues(o)
	}
	for _, c := range []string{"fetch", "webhook"} {
		m.requestSecs.WithLabelValues(c)
		for _, o := range []string{"2xx", "3xx", "4xx", "5xx", "error"} {
			m.requests.WithLabelValues(c, o)
		}
	}
	if reg != nil {
		reg.MustRegister(m.stageSeconds, m.chunks, m.documents, m.requests, m.requestSecs)
	}
	return m
}

// stage starts the span of one stage of a document; end records its time
// and error.
func (s *Service) stage(ctx context.Context, name string) (context.Context, func(error)) {
	start := time.Now()
	ctx, span := s.tracer.Start(ctx, "ingest."+name)
	return ctx, func(err error) {
		s.metrics.stageSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
		endSpan(span, err)
	}
}

// endSpan ends span, marked failed when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceParent is the W3C traceparent of ctx's span ("" without one), carried
// in the ingest message so that a document's trace continues from its
// upload on whichever worker ingests it.
func traceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// withTraceParent returns ctx carrying the remote span of tp.
func withTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t
}

// measured counts an outbound client's requests by outcome and times them.
type measured struct {
	next   http.RoundTripper
	client string
	m      *metrics
}

func (rt measured) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := rt.next.RoundTrip(req)
	rt.m.requestSecs.WithLabelValues(rt.client).Observe(time.Since(start).Seconds())
	outcome := "error"
	if err == nil {
		outcome = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}[min(max(resp.StatusCode/100, 1), 5)-1]
	} else if errors.Is(err, context.Canceled) {
		return resp, err
	}
	rt.m.requests.WithLabelValues(rt.client, outcome).Inc()
	return resp, err
}

// measure makes c count and time its requests as client.
func (m *metrics) measure(c *http.Client, client string) *http.Client {
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = measured{next: next, client: client, m: m}
	return c
}
