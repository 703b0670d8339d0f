package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Outcome is what a driver does with a delivery once its handler returned.
type Outcome int

const (
	Ack        Outcome = iota // acknowledge the message
	Redeliver                 // leave it unacknowledged for a later delivery
	DeadLetter                // move it to the dead-letter destination, acknowledged
)

// Deliver runs h for m and decides the message's fate by the contract of the
// package documentation; a driver only maps the Outcome to its queue. A panic
// in h is a failure, so one bad message cannot take the worker down. A
// failure after ctx ended is blamed on shutdown. The error is the handler's.
func Deliver(ctx context.Context, h Handler, m Message, maxDeliveries int, log *slog.Logger) (Outcome, error) {
	err := call(ctx, h, m)
	switch {
	case err == nil:
		return Ack, nil
	case errors.Is(err, ErrPermanent):
		log.Warn("mq: permanent failure, dead-lettering", "err", err)
		return DeadLetter, err
	case ctx.Err() != nil:
		log.Info("mq: shutdown interrupted the handler; left for redelivery", "err", err)
		return Redeliver, err
	case m.Deliveries >= maxDeliveries:
		log.Warn("mq: last delivery failed, dead-lettering", "err", err)
		return DeadLetter, err
	case errors.Is(err, ErrRetryLater):
		log.Debug("mq: retry later", "err", err)
	default:
		log.Warn("mq: handler failed; will be redelivered", "err", err)
	}
	return Redeliver, err
}

func call(ctx context.Context, h Handler, m Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h(ctx, m)
}

// Backoff doubles a pause from Min to Max, so a dead queue is retried promptly
// at first and then without spinning.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// Reset makes the next pause Min again.
func (b *Backoff) Reset() { b.next = 0 }

// Wait sleeps for the next pause; it reports false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	b.next = min(max(2*b.next, b.Min), b.Max)
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
