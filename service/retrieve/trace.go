package retrieve

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t
}

// endSpan ends span, marked failed when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// step starts the span of one step of a search, a child of
// retrieve.search.
func (s *Searcher) step(ctx context.Context, name string) (context.Context, func(error)) {
	ctx, span := s.tracer.Start(ctx, name)
	return ctx, func(err error) { endSpan(span, err) }
}

// tracedReranker makes a retrieve.rerank span of each call to r; nil stays
// nil (no reranker).
func tracedReranker(r Reranker, t trace.Tracer) Reranker {
	if r == nil {
		return nil
	}
	return spanReranker{r: r, t: t}
}

type spanReranker struct {
	r Reranker
	t trace.Tracer
}

func (s spanReranker) Rerank(ctx context.Context, query string, docs []string) ([]float64, error) {
	ctx, span := s.t.Start(ctx, "retrieve.rerank")
	scores, err := s.r.Rerank(ctx, query, docs)
	endSpan(span, err)
	return scores, err
}
