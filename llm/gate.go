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

// RetryGate is a Gate that can give a call the provider refused its place
// back (QueueGate). With maxWait > 0 (the embedding endpoint has a budget)
// the embedder absorbs a 429 as chat does: the grant's Throttled shrinks
// the budget for every instance and holds grants back for the time the
// provider named, and the call queues again at the place it had, ahead of
// later calls of its kind, until maxWait has passed since its first try;
// it does not back off on its own, nor count the refusals as retries.
// With maxWait 0 the refusals are retries that back off as any error, and
// each try queues at the place of the first.
type RetryGate interface {
	Gate
	// Budget is the budget kind's calls are admitted by, and how long
	// refusals may keep one waiting; nil when the gate keeps no places.
	Budget(kind service.EmbedKind) (b Budget, maxWait time.Duration)
}

func (e *remoteEmbedder) admit(ctx context.Context, kind service.EmbedKind, texts []string) (func(), error) {
	if e.gate == nil {
		return func() {}, nil
	}
	return e.gate.Admit(ctx, kind, textTokens(texts))
}

// textTokens is texts' length in tokens, as a budget reserves them.
func textTokens(texts []string) int {
	n := 0
	for _, t := range texts {
		n += text.CountTokens(t)
	}
	return n
}

// attempt is embedBatch's try of call: behind the gate, passed once per
// try so no permit is held while a retry waits, or, when the gate keeps
// places (RetryGate), through its budget, which absorbs 429s.
func (e *remoteEmbedder) attempt(ctx context.Context, kind service.EmbedKind, texts []string, call func() error) func() (bool, error) {
	if rg, ok := e.gate.(RetryGate); ok {
		if b, maxWait := rg.Budget(kind); b != nil && maxWait > 0 {
			return reservedAttempt(ctx, b, textTokens(texts), maxWait, e.retry.now, func() (bool, error) { return true, call() })
		} else if b != nil {
			return placedAttempt(ctx, b, textTokens(texts), call)
		}
	}
	return func() (bool, error) {
		release, err := e.admit(ctx, kind, texts)
		if err != nil {
			return false, err
		}
		err = call()
		// A Retry-After is reported while the permit is held, so no other
		// call takes the permit before the gate knows to hold it back.
		e.throttled(ctx, kind, err)
		release()
		return true, err
	}
}

// placedAttempt is a retrier attempt of call through budget that keeps
// its place: a try the provider refused (429 or a Retry-After) is given
// back through Throttled, and the next try, after the retrier's backoff,
// queues at the place the refused one had.
func placedAttempt(ctx context.Context, budget Budget, tokens int, call func() error) func() (bool, error) {
	var refused BudgetGrant
	return func() (bool, error) {
		g, err := budget.Admit(ctx, tokens, refused)
		if err != nil {
			return false, err
		}
		err = call()
		if d, ok := throttling(err); ok {
			g.Throttled(d)
			refused = g
			return true, err
		}
		g.Done(-1)
		refused = nil
		return true, err
	}
}

// throttling reports whether err asks the gate to hold calls back (a 429,
// or any answer with Retry-After), and for how long.
func throttling(err error) (time.Duration, bool) {
	var se *statusError
	if errors.As(err, &se) && (se.retryAfter > 0 || se.code == http.StatusTooManyRequests) {
		return se.retryAfter, true
	}
	return 0, false
}

// throttled tells the gate about a Retry-After in err.
func (e *remoteEmbedder) throttled(ctx context.Context, kind service.EmbedKind, err error) {
	if d, ok := throttling(err); ok && e.gate != nil {
		e.gate.Throttled(ctx, kind, d)
	}
}
