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
	start := b.now()
	var retry BudgetGrant
	for {
		g, err := b.budget.Admit(ctx, tokens, retry)
		if err != nil {
			if ctx.Err() != nil {
				return service.Usage{}, err
			}
			// No room within the wait: a rate limit of ours, which the
			// failover treats as the provider's.
			return service.Usage{}, &statusError{code: http.StatusTooManyRequests, body: "budget: " + err.Error()}
		}
		emitted := false
		u, err := b.model.Stream(ctx, req, func(d service.Delta) error {
			emitted = true
			return onDelta(d)
		})
		if throttle, ok := refusal(err); ok && !emitted && ctx.Err() == nil {
			g.Throttled(throttle)
			if b.now().Sub(start) < b.maxWait {
				retry = g
				continue
			}
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
