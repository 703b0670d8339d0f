package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/service/usage"
	"github.com/ragent-go/ragent/text"
)

// usageMetrics are the Prometheus series of usage and quotas (docs/usage-and-quotas.md
// "Usage and quotas").
type usageMetrics struct {
	tokens   *prometheus.CounterVec
	refusals *prometheus.CounterVec
	dropped  prometheus.Counter
}

func newUsageMetrics(reg prometheus.Registerer) *usageMetrics {
	m := &usageMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_llm_tokens_total",
			Help: "Tokens spent by model calls, as recorded in usage: kind (answer, rewrite, intent, title, rerank, embedding), type (prompt, completion) and whether ragent estimated them.",
		}, []string{"kind", "type", "estimated"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_quota_refusals_total",
			Help: "Requests refused with quota_exceeded, by the subject (user, group, key) and metric (tokens, requests) of the quota.",
		}, []string{"subject", "metric"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ragent_usage_dropped_total",
			Help: "Usage records dropped because Postgres stayed unreachable until the buffer filled.",
		}),
	}
	reg.MustRegister(m.tokens, m.refusals, m.dropped)
	return m
}

func (m *usageMetrics) recorded(r service.UsageRecord) {
	if r.Kind == service.UsageRequest {
		return
	}
	est := strconv.FormatBool(r.Estimated)
	m.tokens.WithLabelValues(string(r.Kind), "prompt", est).Add(float64(r.PromptTokens))
	m.tokens.WithLabelValues(string(r.Kind), "completion", est).Add(float64(r.CompletionTokens))
}

// callRecord starts the usage record of ctx's model call: whom it is
// spent for, its kind (the context's, else kind) and its stable id.
func callRecord(ctx context.Context, kind service.UsageKind, model string) service.UsageRecord {
	scope := service.UsageScopeFrom(ctx)
	rec := service.UsageRecord{UserID: scope.UserID, KeyID: scope.KeyID, KnowledgeBaseID: scope.KnowledgeBaseID,
		Model: model, Kind: kind}
	if call, ok := service.UsageCallFrom(ctx); ok {
		rec.Kind, rec.CallID = cmp.Or(call.Kind, kind), call.ID
	}
	return rec
}

// meteredChat records the usage of every call of a chat model: the
// provider's count when it reported one (OpenAI's usage, the stream's
// include_usage), else the estimate the llm package makes. A call that
// failed or was stopped is recorded with what it spent.
type meteredChat struct {
	model service.ChatModel
	meter *usage.Meter
	kind  service.UsageKind // when the context names none
	name  string            // the model, when the request names none
}

func (m meteredChat) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	u, err := m.model.Stream(ctx, req, onDelta)
	if u.PromptTokens > 0 || u.CompletionTokens > 0 {
		rec := callRecord(ctx, m.kind, cmp.Or(req.Model, m.name))
		rec.PromptTokens, rec.CompletionTokens, rec.Estimated = u.PromptTokens, u.CompletionTokens, u.Estimated
		m.meter.Record(rec)
	}
	return u, err
}

// meteredEmbedder records the tokens of every embedding call, estimated
// with ragent's tokenizer: the service.Embedder interface returns no
// usage (the provider's count is in ragent_embed_tokens_total).
type meteredEmbedder struct {
	service.Embedder
	meter *usage.Meter
}

func (m meteredEmbedder) Embed(ctx context.Context, kind service.EmbedKind, texts []string) ([][]float32, error) {
	vecs, err := m.Embedder.Embed(ctx, kind, texts)
	if err == nil {
		rec := callRecord(ctx, service.UsageEmbedding, m.Model())
		for _, t := range texts {
			rec.PromptTokens += text.CountTokens(t)
		}
		rec.Estimated = true
		m.meter.Record(rec)
	}
	return vecs, err
}

// meteredReranker records the estimated tokens of every rerank call: the
// query once per document, and the documents.
type meteredReranker struct {
	r     retrieve.Reranker
	meter *usage.Meter
	model string
}

func (m meteredReranker) Rerank(ctx context.Context, query string, docs []string) ([]float64, error) {
	scores, err := m.r.Rerank(ctx, query, docs)
	if err == nil {
		rec := callRecord(ctx, service.UsageRerank, m.model)
		rec.PromptTokens = llm.RerankTokens(query, docs)
		rec.Estimated = true
		m.meter.Record(rec)
	}
	return scores, err
}

// newCallID names a model call that carries no id of its own: it is
// tried once, so any unique id will do.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call:" + hex.EncodeToString(b[:])
}
