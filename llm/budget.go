package llm

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Budget admits the calls of one model endpoint against the requests and
// tokens per minute its provider allows, shared by every instance
// (cmd/ragent backs it with the fair queue, README "Budgets, usage and
// quotas").
type Budget interface {
	// Admit waits until the budget has room for a call of about tokens
	// (the prompt estimated plus the answer's maximum). retry is the grant
	// of an earlier try that the provider refused (nil at first): the call
	// takes back its place in the queue.
	Admit(ctx context.Context, tokens int, retry BudgetGrant) (BudgetGrant, error)
}

// BudgetGrant is one admitted call.
type BudgetGrant interface {
	// Done settles the reservation with the tokens the call spent
	// (negative: keep the reservation).
	Done(tokens int)
	// Throttled says the provider refused the call (429), asking to wait
	// retryAfter (0 when it did not say): the budget shrinks everywhere.
	Throttled(retryAfter time.Duration)
}

// DefaultAnswerReservation is what a call that names no max_tokens
// reserves for its answer (Config.AnswerReservation).
const DefaultAnswerReservation = 1024

// budgetedChat passes every call of an endpoint's model through its
// budget. A 429 before the first token shrinks the budget and queues the
// call again at its place, so the user sees a longer wait instead of an
// error, until maxWait has passed since the first try; then the refusal
// goes to the failover, which tries the next endpoint.
type budgetedChat struct {
	model   service.ChatModel
	budget  Budget
	reserve int
	maxWait time.Duration
	now     func() time.Time
}

func (b *budgetedChat) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	tokens := estimateUsage(req.Messages, "").PromptTokens + cmp.Or(max(req.MaxTokens, 0), b.reserve)
	var u service.Usage
	g, err := underBudget(ctx, b.budget, tokens, b.maxWait, b.now, func() (bool, error) {
		emitted := false
		var err error
		u, err = b.model.Stream(ctx, req, func(d service.Delta) error {
			emitted = true
			return onDelta(d)
		})
		return !emitted, err
	})
	if g == nil {
		return u, err
	}
	spent := u.TotalTokens
	if spent == 0 {
		spent = u.PromptTokens + u.CompletionTokens
	}
	if spent == 0 && err != nil {
		spent = -1 // nothing known: the reservation stands
	}
	g.Done(spent)
	return u, err
}

// reservedAttempt is one retrier attempt of call under budget for an
// endpoint whose answer carries no token count the budget can use (the
// reranker, embeddings): the grant is settled as reserved, and a refusal
// that outlasted maxWait is final (no backoff on top of the wait).
func reservedAttempt(ctx context.Context, budget Budget, tokens int, maxWait time.Duration, now func() time.Time, call func() (bool, error)) func() (bool, error) {
	return func() (bool, error) {
		g, err := underBudget(ctx, budget, tokens, maxWait, now, call)
		if g == nil {
			return false, err
		}
		g.Done(-1)
		return true, err
	}
}

// underBudget makes one call of about tokens through budget. A refusal of
// the provider (429) that call may retry (nothing was emitted yet) shrinks
// the budget and queues the call again at its place, until maxWait has
// passed since the first try; then the refusal is returned. It returns the
// grant of the call's last try, which the caller settles with Done, and
// the call's error; the grant is nil when the budget admitted nothing (an
// error of our own: no room within the wait becomes a 429, which the
// failover treats as the provider's) or the last try was refused.
func underBudget(ctx context.Context, budget Budget, tokens int, maxWait time.Duration, now func() time.Time, call func() (retryable bool, err error)) (BudgetGrant, error) {
	start := now()
	var retry BudgetGrant
	for {
		g, err := budget.Admit(ctx, tokens, retry)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, &statusError{code: http.StatusTooManyRequests, body: "budget: " + err.Error()}
		}
		retryable, err := call()
		throttle, ok := refusal(err)
		if !ok || !retryable || ctx.Err() != nil {
			return g, err
		}
		g.Throttled(throttle)
		if now().Sub(start) >= maxWait {
			return nil, err
		}
		retry = g
	}
}

// refusal reports whether err is the provider refusing for its rate limit
// (429, or a 503 with Retry-After), and how long it asked to wait.
func refusal(err error) (time.Duration, bool) {
	var se *statusError
	if !errors.As(err, &se) {
		return 0, false
	}
	if se.code == http.StatusTooManyRequests || se.code == http.StatusServiceUnavailable && se.retryAfter > 0 {
		return se.retryAfter, true
	}
	return 0, false
}
