package llm

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragent-go/ragent/service"
)

// EmbedMetrics counts embedding calls (one Embed, however many HTTP batches
// it takes), their texts, the tokens the provider reports and their time, by
// kind (query, document).
type EmbedMetrics struct {
	calls   *prometheus.CounterVec   // kind, outcome
	texts   *prometheus.CounterVec   // kind
	seconds *prometheus.HistogramVec // kind
	tokens  prometheus.Counter
}

// Outcomes of ragent_embed_calls_total.
const (
	embedOK        = "ok"
	embedError     = "error"
	embedBusy      = "busy"
	embedCancelled = "cancelled"
)

// NewEmbedMetrics registers the embedding metrics on reg.
func NewEmbedMetrics(reg prometheus.Registerer) *EmbedMetrics {
	m := &EmbedMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_embed_calls_total",
			Help: "Embed calls by kind (query, document) and outcome: ok, error (after retries), busy (the embedding gate refused), cancelled.",
		}, []string{"kind", "outcome"}),
		texts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_embed_texts_total",
			Help: "Texts embedded successfully, by kind.",
		}, []string{"kind"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragent_embed_seconds",
			Help:    "Time of one Embed call (all its batches, retries and gate waits), by kind.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"kind"}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ragent_embed_tokens_total",
			Help: "Input tokens the embedding provider reported (usage.prompt_tokens, Ollama's prompt_eval_count); providers that report none add nothing.",
		}),
	}
	for _, k := range []service.EmbedKind{service.EmbedQuery, service.EmbedDocument} {
		m.texts.WithLabelValues(kindLabel(k))
		m.seconds.WithLabelValues(kindLabel(k))
		for _, o := range []string{embedOK, embedError, embedBusy, embedCancelled} {
			m.calls.WithLabelValues(kindLabel(k), o)
		}
	}
	reg.MustRegister(m.calls, m.texts, m.seconds, m.tokens)
	return m
}

func kindLabel(k service.EmbedKind) string {
	if k == service.EmbedQuery {
		return "query"
	}
	return "document"
}

// addTokens counts provider-reported tokens; nil-safe.
func (m *EmbedMetrics) addTokens(n int) {
	if m != nil && n > 0 {
		m.tokens.Add(float64(n))
	}
}

// measuredEmbedder is an Embedder counted by EmbedMetrics.
type measuredEmbedder struct {
	service.Embedder
	m *EmbedMetrics
}

func (e measuredEmbedder) Embed(ctx context.Context, kind service.EmbedKind, texts []string) ([][]float32, error) {
	start := time.Now()
	vecs, err := e.Embedder.Embed(ctx, kind, texts)
	k := kindLabel(kind)
	e.m.seconds.WithLabelValues(k).Observe(time.Since(start).Seconds())
	outcome := embedOK
	switch {
	case err == nil:
		e.m.texts.WithLabelValues(k).Add(float64(len(texts)))
	case ctx.Err() != nil:
		outcome = embedCancelled
	case errors.Is(err, service.ErrBusy):
		outcome = embedBusy
	default:
		outcome = embedError
	}
	e.m.calls.WithLabelValues(k, outcome).Inc()
	return vecs, err
}

// unwrapEmbedder returns the embedder a measuredEmbedder counts for.
func unwrapEmbedder(e service.Embedder) service.Embedder {
	if m, ok := e.(measuredEmbedder); ok {
		return m.Embedder
	}
	return e
}
