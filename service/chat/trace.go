package chat

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// span starts a span of the turn's trace: chat.turn, and under it the
// queue wait, rewrite, intent, retrieval, answer and title.
func (s *Service) span(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracerOr(s.cfg.Tracer).Start(ctx, name)
}

func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t
}
