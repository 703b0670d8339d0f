package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Embedding traffic (docs/embeddings.md "Embedding traffic"): QueueGate is
// the Gate of every call to the embedding provider, from every instance,
// on one cluster-wide fair queue (cmd/ragent adapts the ratelimit limiter
// named "embed" to EmbedQueue). Questions queue in a lane per user and go
// ahead of every document batch; document batches queue in the lane
// documents:<knowledge base>:<uploader>, so the fair queue serves knowledge
// bases (and the uploaders within one) in turn: a big import's batches in
// flight raise its level, and a small upload into another knowledge base
// goes ahead of the import's next batches. Re-embedding takes the same
// lane. A provider's Retry-After pauses document batches on every
// instance (EmbedPause), and a refused call keeps its place in the queue.

// EmbedQueue is the cluster-wide fair queue QueueGate admits calls through.
type EmbedQueue interface {
	// Acquire waits for the right to make one call of kind about tokens
	// long, queued in lane; questions go ahead of document batches. retry is the grant of an earlier try of the call
	// that the provider refused (nil at first): the call takes back the
	// place that try had. When the queue's own wait ends first it returns
	// an error wrapping ErrQueueTimeout.
	Acquire(ctx context.Context, lane string, kind service.EmbedKind, tokens int, retry EmbedGrant) (EmbedGrant, error)
	// Throttled reports that the provider refused g's call (g may be nil
	// when no grant is known), asking to wait d (0 when it did not say):
	// the budget, if any, shrinks for every instance; g is given back.
	Throttled(ctx context.Context, g EmbedGrant, d time.Duration)
	// Budgeted reports whether the queue also spends a budget (requests
	// and tokens per window), which then holds every grant back while a
	// refusal's Retry-After lasts.
	Budgeted() bool
}

// EmbedGrant is one admitted call of an EmbedQueue.
type EmbedGrant interface {
	// ReleaseUsed gives the grant back, settling its reservation with the
	// tokens the call spent (negative: as reserved).
	ReleaseUsed(tokens int)
}

// EmbedPause is a cluster-wide pause of document batches.
type EmbedPause interface {
	// Extend makes the pause last at least d from now.
	Extend(ctx context.Context, d time.Duration) error
	// Left is how long the pause lasts still.
	Left(ctx context.Context) (time.Duration, error)
	// Wait returns once the pause is over, or with ctx's error or the
	// store's (then the caller goes ahead).
	Wait(ctx context.Context) error
}

// ErrQueueTimeout is an EmbedQueue's own wait ending before a grant.
var ErrQueueTimeout = errors.New("no embedding slot within the queue's wait")

// QueueGate is Gate and RetryGate on an EmbedQueue and an EmbedPause.
type QueueGate struct {
	queue        EmbedQueue
	pause        EmbedPause
	queryWait    time.Duration
	documentWait time.Duration
	log          *slog.Logger
}

// NewQueueGate returns the gate: a question waits up to queryWait for its
// grant (RAGENT_EMBEDDING_QUERY_WAIT), a document batch up to
// documentWait (the queue's own wait bounds it too).
func NewQueueGate(queue EmbedQueue, pause EmbedPause, queryWait, documentWait time.Duration, log *slog.Logger) *QueueGate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &QueueGate{queue: queue, pause: pause, queryWait: queryWait, documentWait: documentWait, log: log}
}

var errQueryWait = errors.New("no embedding slot for the query within RAGENT_EMBEDDING_QUERY_WAIT")

// Admit implements Gate. A query waits up to queryWait in the queries'
// lane (fair between users); a document batch first waits out a pause,
// then queues behind the queries, and waits again if a pause began while
// it queued.
func (g *QueueGate) Admit(ctx context.Context, kind service.EmbedKind, tokens int) (func(), error) {
	p, err := g.admit(ctx, kind, tokens, nil)
	if err != nil {
		return nil, err
	}
	return func() { p.ReleaseUsed(-1) }, nil
}

// admit is Admit's grant; retry, when not nil, is the grant of an earlier
// try of the call that the provider refused, whose place in the queue the
// call takes back.
func (g *QueueGate) admit(ctx context.Context, kind service.EmbedKind, tokens int, retry EmbedGrant) (EmbedGrant, error) {
	if kind == service.EmbedQuery {
		lane := "query"
		if p, ok := service.PrincipalFrom(ctx); ok {
			lane = "query:" + p.UserID.String()
		}
		qctx, cancel := context.WithTimeoutCause(ctx, g.queryWait, errQueryWait)
		defer cancel()
		grant, err := g.queue.Acquire(qctx, lane, kind, tokens, retry)
		if err != nil {
			if ctx.Err() == nil && (errors.Is(err, ErrQueueTimeout) || context.Cause(qctx) == errQueryWait) {
				return nil, fmt.Errorf("%w: %v", service.ErrBusy, errQueryWait)
			}
			return nil, err
		}
		return grant, nil
	}
	// With a budget, a refused call's retry queues at once at its place:
	// the refusal's budget hold, set with the pause and as long, keeps it
	// (and every other grant) back meanwhile. Without one it waits out the
	// pause first and then takes its place back.
	held := retry != nil && g.queue.Budgeted()
	for {
		if !held {
			if err := g.pause.Wait(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				g.log.WarnContext(ctx, "embedding pause unreadable; going ahead", "err", err)
			}
		}
		grant, err := g.queue.Acquire(ctx, documentLane(ctx), kind, tokens, retry)
		if err != nil {
			if errors.Is(err, ErrQueueTimeout) {
				return nil, fmt.Errorf("%w: no embedding slot for a document batch within %s", service.ErrUnavailable, g.documentWait)
			}
			return nil, err
		}
		if held {
			return grant, nil
		}
		if left, err := g.pause.Left(ctx); err != nil || left <= 0 {
			return grant, nil
		}
		// A pause began while the batch queued: give the grant back (no
		// call went out) and wait again, keeping the place it was granted at.
		grant.ReleaseUsed(0)
		retry = grant
	}
}

// Budget implements RetryGate: a refused call keeps its place — a query's
// among the queries, a document batch's among the batches (behind every
// query). With a budget the gate absorbs the refusal (maxWait: within
// RAGENT_EMBEDDING_QUERY_WAIT of a query's first try, documentWait of a
// batch's); without one maxWait is 0 and the embedder's retries back off
// as for any error, each try at the place of the first.
func (g *QueueGate) Budget(kind service.EmbedKind) (Budget, time.Duration) {
	b := queueBudget{g: g, kind: kind}
	switch {
	case !g.queue.Budgeted():
		return b, 0
	case kind == service.EmbedQuery:
		return b, g.queryWait
	default:
		return b, g.documentWait
	}
}

// queueBudget is Budget on the gate for calls of one kind.
type queueBudget struct {
	g    *QueueGate
	kind service.EmbedKind
}

func (b queueBudget) Admit(ctx context.Context, tokens int, retry BudgetGrant) (BudgetGrant, error) {
	var prev EmbedGrant
	if r, ok := retry.(*queueGrant); ok {
		prev = r.grant
	}
	grant, err := b.g.admit(ctx, b.kind, tokens, prev)
	if err != nil {
		return nil, err
	}
	return &queueGrant{b: b, grant: grant, ctx: ctx}, nil
}

// queueGrant is one admitted embedding call.
type queueGrant struct {
	b     queueBudget
	grant EmbedGrant
	ctx   context.Context
}

func (g *queueGrant) Done(tokens int) { g.grant.ReleaseUsed(tokens) }

// Throttled shrinks the budget and pauses document batches, as the
// gate's Throttled, and gives the grant back.
func (g *queueGrant) Throttled(d time.Duration) {
	g.b.g.throttled(g.ctx, g.grant, d)
}

// documentLane is the queue lane of a document batch: its knowledge base
// and uploader, so imports share the lane fairly.
func documentLane(ctx context.Context) string {
	s := service.UsageScopeFrom(ctx)
	return "documents:" + s.KnowledgeBaseID.String() + ":" + s.UserID.String()
}

// Throttled implements Gate: whatever call was told to wait, document
// batches on every instance wait that long, and the embedding budget
// shrinks for every instance.
func (g *QueueGate) Throttled(ctx context.Context, kind service.EmbedKind, d time.Duration) {
	g.throttled(ctx, nil, d)
}

// throttled pauses document batches and shrinks the budget for d; grant,
// when not nil, is the refused call's, given back once both are set, so no
// other call takes its slot before the gate holds them back.
func (g *QueueGate) throttled(ctx context.Context, grant EmbedGrant, d time.Duration) {
	err := g.pause.Extend(context.WithoutCancel(ctx), d)
	g.queue.Throttled(ctx, grant, d)
	if err != nil {
		g.log.WarnContext(ctx, "could not pause document embedding", "err", err)
		return
	}
	g.log.WarnContext(ctx, "embedding provider asked to wait; document embedding paused on every instance", "retry_after", d.String())
}
