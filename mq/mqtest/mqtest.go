// Package mqtest is the contract suite of package mq: Run checks a driver
// against the delivery contract of the mq package documentation, so both
// drivers are held to one set of scenarios.
package mqtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq"
)

// MaxDeliveries is the maximum number of deliveries the driver's consumers
// must be configured with.
const MaxDeliveries = 3

// DeadLetter is a dead-lettered message as the driver stored it.
type DeadLetter struct {
	Key, Body, Group string
	OriginID         string // the ID of the original message
	Deliveries       string // deliveries made, as stored
	Error            string // the failure's text
}

// Driver is one fresh topic of a driver under test.
type Driver struct {
	Group string
	// Publish publishes body under key to the topic.
	Publish func(t *testing.T, key, body string)
	// Start runs a new consumer of the topic for Group with handler h and
	// MaxDeliveries deliveries; stop ends it and waits for Run to return.
	Start func(t *testing.T, h mq.Handler) (stop func())
	// DeadLetter returns the dead letter of key, nil while there is none.
	DeadLetter func(t *testing.T, key string) *DeadLetter
	// FirstDelivery bounds the wait for a consumer's first delivery,
	// Redelivery the wait for a redelivery.
	FirstDelivery, Redelivery time.Duration
	// Quiet is longer than a redelivery would take: after it, a message
	// that was settled must not have been delivered again.
	Quiet time.Duration
}

// script routes each key to a behaviour and records every delivery per key,
// so that all scenarios share one consumer (RocketMQ's first rebalance is
// slow) and cannot disturb each other.
type script struct {
	mu         sync.Mutex
	behaviours map[string]func(ctx context.Context, m mq.Message, call int) error
	got        map[string][]mq.Message
}

func (s *script) on(key string, f func(ctx context.Context, m mq.Message, call int) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviours[key] = f
}

func (s *script) handle(ctx context.Context, m mq.Message) error {
	s.mu.Lock()
	s.got[m.Key] = append(s.got[m.Key], m)
	call := len(s.got[m.Key])
	f := s.behaviours[m.Key]
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, m, call)
}

func (s *script) deliveries(key string) []mq.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mq.Message(nil), s.got[key]...)
}

// Run checks d against the delivery contract.
func Run(t *testing.T, d Driver) {
	s := &script{behaviours: map[string]func(context.Context, mq.Message, int) error{}, got: map[string][]mq.Message{}}
	stop := d.Start(t, s.handle)
	t.Run("publish and consume", func(t *testing.T) { publishAndConsume(t, d, s) })
	t.Run("same key published five times reaches the handler five times", func(t *testing.T) { sameKeyFiveTimes(t, d, s) })
	t.Run("handler failure is redelivered", func(t *testing.T) { failureRedelivered(t, d, s) })
	t.Run("dead letters", func(t *testing.T) { deadLetters(t, d, s) })
	t.Run("consumer stopped mid-message", func(t *testing.T) { stoppedMidMessage(t, d, s, stop) })
}

// publishAndConsume: each body reaches the handler once, with its ID and topic.
func publishAndConsume(t *testing.T, d Driver, s *script) {
	bodies := []string{"one", "二", "hello 你好"}
	for i, b := range bodies {
		d.Publish(t, fmt.Sprintf("basic%d:1", i), b)
	}
	for i, b := range bodies {
		key := fmt.Sprintf("basic%d:1", i)
		testenv.Eventually(t, d.FirstDelivery, "the delivery of "+key, func() bool { return len(s.deliveries(key)) > 0 })
		m := s.deliveries(key)[0]
		if string(m.Body) != b || m.Deliveries != 1 || m.ID == "" || m.Topic == "" {
			t.Errorf("delivered %+v (body %q)", m, m.Body)
		}
	}
}

// sameKeyFiveTimes: a key is no deduplication: five publications are five messages.
func sameKeyFiveTimes(t *testing.T, d Driver, s *script) {
	for range 5 {
		d.Publish(t, "same:1", "x")
	}
	testenv.Eventually(t, d.Redelivery, "five deliveries", func() bool { return len(s.deliveries("same:1")) >= 5 })
	ids := map[string]bool{}
	for _, m := range s.deliveries("same:1") {
		ids[m.ID] = true
	}
	if len(ids) != 5 {
		t.Errorf("distinct IDs = %d, want 5 (one per publication)", len(ids))
	}
}

// failureRedelivered: a failed message (or one told to retry later) comes again, once, and no dead letter is left.
func failureRedelivered(t *testing.T, d Driver, s *script) {
	failures := map[string]error{
		"fail-once:1":   io.ErrUnexpectedEOF,
		"retry-later:1": fmt.Errorf("guard: %w", mq.ErrRetryLater),
	}
	for key, failure := range failures {
		s.on(key, func(_ context.Context, _ mq.Message, call int) error {
			if call == 1 {
				return failure
			}
			return nil
		})
		d.Publish(t, key, "x")
	}
	for key := range failures {
		testenv.Eventually(t, d.Redelivery, "the redelivery of "+key, func() bool { return len(s.deliveries(key)) >= 2 })
		got := s.deliveries(key)
		if got[0].ID != got[1].ID || got[0].Deliveries != 1 || got[1].Deliveries != 2 {
			t.Errorf("%s: deliveries %+v, want the same message with Deliveries 1 then 2", key, got)
		}
	}
	time.Sleep(d.Quiet)
	for key := range failures {
		if n := len(s.deliveries(key)); n != 2 {
			t.Errorf("%s: deliveries = %d after the ack, want 2", key, n)
		}
		if dl := d.DeadLetter(t, key); dl != nil {
			t.Errorf("%s: dead letter %+v, want none", key, dl)
		}
	}
}

// deadLetters: a message that always fails, fails permanently or panics ends as a dead letter after the right number of calls.
func deadLetters(t *testing.T, d Driver, s *script) {
	boom := errors.New("boom")
	tests := []struct {
		key        string
		behaviour  func(context.Context, mq.Message, int) error
		calls      int
		deliveries string
		err        string
	}{
		{"always-fails:1", func(context.Context, mq.Message, int) error { return boom }, MaxDeliveries, fmt.Sprint(MaxDeliveries), "boom"},
		{"permanent:1", func(context.Context, mq.Message, int) error {
			return fmt.Errorf("parse: %w", mq.Permanent(errors.New("corrupt pdf")))
		}, 1, "1", "parse: corrupt pdf"},
		{"panics:1", func(context.Context, mq.Message, int) error { panic("bad input") },
			MaxDeliveries, fmt.Sprint(MaxDeliveries), "handler panic: bad input"},
	}
	for _, tt := range tests {
		s.on(tt.key, tt.behaviour)
		d.Publish(t, tt.key, "payload "+tt.key)
	}
	for _, tt := range tests {
		testenv.Eventually(t, d.FirstDelivery+MaxDeliveries*d.Redelivery, "the dead letter of "+tt.key,
			func() bool { return d.DeadLetter(t, tt.key) != nil })
		dl := d.DeadLetter(t, tt.key)
		want := DeadLetter{Key: tt.key, Body: "payload " + tt.key, Group: d.Group,
			OriginID: s.deliveries(tt.key)[0].ID, Deliveries: tt.deliveries, Error: tt.err}
		if *dl != want {
			t.Errorf("dead letter = %+v, want %+v", *dl, want)
		}
	}
	time.Sleep(d.Quiet)
	for _, tt := range tests {
		if n := len(s.deliveries(tt.key)); n != tt.calls {
			t.Errorf("%s: handler calls = %d, want %d", tt.key, n, tt.calls)
		}
	}
}

// stoppedMidMessage: a message whose consumer stopped while handling it reaches the next consumer.
func stoppedMidMessage(t *testing.T, d Driver, s *script, stop func()) {
	started := make(chan struct{})
	var once sync.Once
	s.on("killed:1", func(ctx context.Context, _ mq.Message, call int) error {
		if call > 1 {
			return nil
		}
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	})
	d.Publish(t, "killed:1", "x")
	select {
	case <-started:
	case <-time.After(d.Redelivery):
		t.Fatal("the message never reached the handler")
	}
	stop()
	if n := len(s.deliveries("killed:1")); n != 1 {
		t.Fatalf("deliveries before the restart = %d, want 1", n)
	}
	d.Start(t, s.handle)
	testenv.Eventually(t, d.FirstDelivery, "the redelivery to a new consumer", func() bool { return len(s.deliveries("killed:1")) >= 2 })
	// Deliveries is not checked: RocketMQ counts only failures it was
	// told about, not deliveries lost to a stopped client.
	if got := s.deliveries("killed:1"); got[1].ID != got[0].ID {
		t.Errorf("redelivered %+v, want the same message as %+v", got[1], got[0])
	}
}
