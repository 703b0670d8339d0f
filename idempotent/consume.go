package idempotent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
)

// The states of a message key. A CONSUMING value carries the consumer's
// token after this prefix so that only that consumer renews or deletes it.
const (
	stateConsuming = "CONSUMING"
	stateConsumed  = "CONSUMED"
)

// finishTimeout bounds the Redis call that records a handler's result; it
// runs on a context detached from the delivery's, which may be cancelled.
const finishTimeout = 5 * time.Second

// Handler processes one message. messageKey identifies the message across
// redeliveries (for ragent's ingestion: "documentId:generation").
type Handler func(ctx context.Context, messageKey string, body []byte) error

// Guard runs each message's handler once even when an at-least-once queue
// delivers the message several times (DESIGN §8.3). Its key is
// {prefix}idem:consume:{group}:{messageKey}.
//
// Redis errors do not stop consumption: when the guard cannot reach Redis it
// runs the handler anyway, logs the error and counts it (result "degraded"
// and redis_errors_total{component="consume"}). The handler must therefore
// tolerate a duplicate; for ingestion the chunks' unique key is that last
// line of defence.
type Guard struct {
	rdb          redis.UniversalClient
	prefix       string
	consumingTTL time.Duration
	consumedTTL  time.Duration
	opt          options
}

// NewGuard returns a Guard. consumingTTL is the lease of a running handler:
// renewed every consumingTTL/3 while it runs, so it bounds how long a
// crashed consumer delays redelivery, not how long a handler may take.
// consumedTTL is how long a processed message is remembered, which should
// exceed the queue's redelivery horizon. Both must be at least a millisecond.
func NewGuard(rdb redis.UniversalClient, prefix string, consumingTTL, consumedTTL time.Duration, cfg Config) *Guard {
	mustTTLs("consume", consumingTTL, consumedTTL)
	return &Guard{rdb: rdb, prefix: prefix, consumingTTL: consumingTTL, consumedTTL: consumedTTL, opt: newOptions(cfg)}
}

func (g *Guard) key(group, messageKey string) string {
	return g.prefix + "idem:consume:" + group + ":" + messageKey
}

// Wrap returns h guarded for consumer group group. The returned handler
//   - runs h when the message has no state, marking it CONSUMING while h runs,
//     then CONSUMED (for consumedTTL) when h succeeds, or deleting the mark
//     when h fails so that the redelivery runs h again; h's error is returned;
//   - returns nil without running h when the message is CONSUMED, so the
//     queue acks the duplicate;
//   - returns an error wrapping ErrInFlight without running h when another
//     consumer is running it, so the queue redelivers it later.
func (g *Guard) Wrap(group string, h Handler) Handler {
	return func(ctx context.Context, messageKey string, body []byte) error {
		key := g.key(group, messageKey)
		token := stateConsuming + ":" + newToken()
		prev, err := consumeBeginScript.Run(ctx, g.rdb, []string{key}, token, g.consumingTTL.Milliseconds()).Text()
		switch {
		case errors.Is(err, redis.Nil):
			return g.run(ctx, key, token, messageKey, body, h)
		case err != nil:
			if ctxErr := ctx.Err(); ctxErr != nil {
				return fmt.Errorf("idempotent: consume %s: %w", key, ctxErr)
			}
			g.degraded(ctx, "mark consuming", key, err)
			return h(ctx, messageKey, body)
		case prev == stateConsumed:
			g.opt.metrics.consumed.WithLabelValues("duplicate").Inc()
			return nil
		default: // CONSUMING by another consumer
			g.opt.metrics.consumed.WithLabelValues("in_flight").Inc()
			return fmt.Errorf("idempotent: consume %s: %w", key, ErrInFlight)
		}
	}
}

// run executes h while holding the CONSUMING mark, then records the result.
func (g *Guard) run(ctx context.Context, key, token, messageKey string, body []byte, h Handler) error {
	wd := g.opt.startWatchdog(ctx, g.rdb, key, token, g.consumingTTL,
		componentConsume, "consume mark", "while the handler ran; a redelivery may run beside it")
	herr := h(ctx, messageKey, body)
	wd.Stop()

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if herr != nil {
		g.opt.metrics.consumed.WithLabelValues("failed").Inc()
		// Only our own mark is deleted: if ours expired, another consumer's
		// run must keep its mark.
		if _, err := lease.Release(fctx, g.rdb, key, token, 0); err != nil {
			g.opt.metrics.redisErrors.WithLabelValues(componentConsume).Inc()
			g.opt.log.WarnContext(ctx, "idempotent: clearing a failed message's mark failed; its redelivery waits for the mark to expire",
				"key", key, "err", err)
		}
		return herr
	}
	g.opt.metrics.consumed.WithLabelValues("processed").Inc()
	// Set unconditionally: the work is done even if our mark expired meanwhile.
	if err := g.rdb.Set(fctx, key, stateConsumed, g.consumedTTL).Err(); err != nil {
		g.opt.metrics.redisErrors.WithLabelValues(componentConsume).Inc()
		g.opt.log.WarnContext(ctx, "idempotent: marking a message consumed failed; a redelivery would run it again",
			"key", key, "err", err)
	}
	return nil
}

func (g *Guard) degraded(ctx context.Context, op, key string, err error) {
	g.opt.metrics.consumed.WithLabelValues("degraded").Inc()
	g.opt.metrics.redisErrors.WithLabelValues(componentConsume).Inc()
	g.opt.log.ErrorContext(ctx, "idempotent: consume guard cannot reach Redis; processing without it",
		"op", op, "key", key, "err", err)
}
