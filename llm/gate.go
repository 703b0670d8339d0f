package llm

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// Gate admits the calls of a remote embedder to its provider. cmd/ragent
// backs it with the cluster-wide fair limiter (docs/embeddings.md "Embedding traffic"):
// at most so many calls at once from every instance together, queries ahead
// of document batches, and document batches held back cluster-wide while
// the provider asks to wait.
type Gate interface {
	// Admit waits for the right to make one call embedding texts of kind,
	// about tokens long (the endpoint's token budget); release gives it
	// back. An error ends the call without retries.
	Admit(ctx context.Context, kind service.EmbedKind, tokens int) (release func(), err error)
	// Throttled reports that the provider answered a call of kind with a
	// 429, or Retry-After d (a 429 or 503; d is 0 when it said none), so
	// the gate can hold others back.
	Throttled(ctx context.Context, kind service.EmbedKind, d time.Duration)
}

func (e *remoteEmbedder) admit(ctx context.Context, kind service.EmbedKind, texts []string) (func(), error) {
	if e.gate == nil {
		return func() {}, nil
	}
	tokens := 0
	for _, t := range texts {
		tokens += text.CountTokens(t)
	}
	return e.gate.Admit(ctx, kind, tokens)
}

// throttled tells the gate about a Retry-After in err.
func (e *remoteEmbedder) throttled(ctx context.Context, kind service.EmbedKind, err error) {
	var se *statusError
	if e.gate != nil && errors.As(err, &se) && (se.retryAfter > 0 || se.code == http.StatusTooManyRequests) {
		e.gate.Throttled(ctx, kind, se.retryAfter)
	}
}
