package service

import "context"

// What a queued request waits for (QueueWait.For).
const (
	WaitSlot   = "slot"   // a permit of the fair queue: calls at once
	WaitBudget = "budget" // room in a model endpoint's requests or tokens per minute
)

// QueueWait is a request's place while it waits in the fair queue, and
// what for.
type QueueWait struct {
	Position, Queued int
	For              string // WaitSlot or WaitBudget
}

var queueReportKey = ctxKey[func(QueueWait)]{"queue report"}

// WithQueueReport returns ctx whose model calls tell report where they wait
// for their endpoint's budget (a chat turn turns it into queue events).
func WithQueueReport(ctx context.Context, report func(QueueWait)) context.Context {
	return queueReportKey.with(ctx, report)
}

// QueueReportFrom returns ctx's report, or nil.
func QueueReportFrom(ctx context.Context) func(QueueWait) {
	f, _ := queueReportKey.from(ctx)
	return f
}
