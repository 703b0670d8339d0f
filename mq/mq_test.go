package mq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ragent-go/ragent/mq"
)

func TestPermanent(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	tests := []struct {
		name          string
		err           error
		wantPermanent bool
		wantCause     bool
	}{
		{"plain", cause, false, true},
		{"permanent", mq.Permanent(cause), true, true},
		{"wrapped permanent", fmt.Errorf("parse: %w", mq.Permanent(cause)), true, true},
		{"retry later", fmt.Errorf("busy: %w", mq.ErrRetryLater), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, mq.ErrPermanent); got != tt.wantPermanent {
				t.Errorf("errors.Is(ErrPermanent) = %v, want %v", got, tt.wantPermanent)
			}
			if got := errors.Is(tt.err, cause); got != tt.wantCause {
				t.Errorf("errors.Is(cause) = %v, want %v", got, tt.wantCause)
			}
		})
	}
	if mq.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	if got := mq.Permanent(cause).Error(); got != cause.Error() {
		t.Errorf("message = %q, want the cause's %q", got, cause.Error())
	}
}

func TestDeliver(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	boom := errors.New("boom")
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name        string
		ctx         context.Context
		handler     mq.Handler
		deliveries  int
		wantOutcome mq.Outcome
		wantErr     string
	}{
		{"success acks", live, func(context.Context, mq.Message) error { return nil }, 1, mq.Ack, ""},
		{"failure is redelivered", live, func(context.Context, mq.Message) error { return boom }, 1, mq.Redeliver, "boom"},
		{"retry later is redelivered", live, func(context.Context, mq.Message) error { return mq.ErrRetryLater }, 1, mq.Redeliver, mq.ErrRetryLater.Error()},
		{"last failure is dead-lettered", live, func(context.Context, mq.Message) error { return boom }, 3, mq.DeadLetter, "boom"},
		{"permanent is dead-lettered at once", live, func(context.Context, mq.Message) error { return mq.Permanent(boom) }, 1, mq.DeadLetter, "boom"},
		{"panic is a failure", live, func(context.Context, mq.Message) error { panic("bad input") }, 3, mq.DeadLetter, "handler panic: bad input"},
		{"shutdown leaves it for redelivery", ended, func(ctx context.Context, _ mq.Message) error { return ctx.Err() }, 3, mq.Redeliver, context.Canceled.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := mq.Deliver(tt.ctx, tt.handler, mq.Message{Deliveries: tt.deliveries}, 3, quiet)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if out != tt.wantOutcome || gotErr != tt.wantErr {
				t.Errorf("Deliver = %v, %q; want %v, %q", out, gotErr, tt.wantOutcome, tt.wantErr)
			}
		})
	}
}

func TestBackoffStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := mq.Backoff{Min: time.Hour, Max: time.Hour}
	if b.Wait(ctx) {
		t.Error("Wait returned true after its context ended")
	}
}
