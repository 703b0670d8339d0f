package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/mq/rocketmq"
)

// brokerAddr is the broker scripts/services.sh starts.
const brokerAddr = "127.0.0.1:10911"

const (
	// firstDelivery allows for the client's first rebalance (~20 s).
	firstDelivery = 60 * time.Second
	// redelivery allows for a 1 s retry delay plus broker scheduling.
	redelivery = 30 * time.Second
)

var quiet = slog.New(slog.DiscardHandler)

func TestMain(m *testing.M) {
	rocketmq.SetClientLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	os.Exit(m.Run())
}

// script routes each message key to a behaviour and records every delivery
// per key, so several scenarios share one consumer and pay for one rebalance.
type script struct {
	mu         sync.Mutex
	behaviours map[string]func(ctx context.Context, m mq.Message, call int) error
	got        map[string][]mq.Message
}

func newScript() *script {
	return &script{
		behaviours: map[string]func(context.Context, mq.Message, int) error{},
		got:        map[string][]mq.Message{},
	}
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

// deadWatch reads the dead-letter topic with the raw client, to see the
// properties mq.Message does not carry.
type deadWatch struct {
	mu   sync.Mutex
	msgs map[string]*primitive.MessageExt // by key
}

func (d *deadWatch) get(key string) *primitive.MessageExt {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.msgs[key]
}

func watchDead(t *testing.T, namesrv, topic string) *deadWatch {
	t.Helper()
	d := &deadWatch{msgs: map[string]*primitive.MessageExt{}}
	pc, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{namesrv})),
		consumer.WithGroupName("test-dead-watch-"+testenv.RandomSuffix()),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(rocketmq.DeadTopic(topic), consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, m := range msgs {
			d.msgs[m.GetKeys()] = m
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatalf("start dead watch: %v", err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	return d
}

// run starts c and returns a stop function that fails the test when Run does
// not return promptly.
func run(t *testing.T, c *rocketmq.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30 s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRocketMQ runs every scenario against the real broker with one topic
// and one consumer group, so the client's slow first rebalance is paid once.
func TestRocketMQ(t *testing.T) {
	namesrv := testenv.RocketMQNamesrv(t)
	topic := "test-ingest-" + testenv.RandomSuffix()
	group := "test-ingest-" + testenv.RandomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rocketmq.CreateTopic(ctx, namesrv, brokerAddr, topic, group); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := rocketmq.CreateTopic(ctx, namesrv, brokerAddr, topic); err != nil {
		t.Fatalf("CreateTopic again: %v", err)
	}

	prod, err := rocketmq.NewProducer(namesrv, rocketmq.ProducerOptions{Instance: "test"})
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { prod.Close() })
	if err := prod.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	publish := func(t *testing.T, key, body string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := prod.Publish(ctx, topic, key, []byte(body)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	s := newScript()
	newConsumer := func() *rocketmq.Consumer {
		c, err := rocketmq.NewConsumer(namesrv, group, topic, s.handle, rocketmq.ConsumerOptions{
			Instance:        "test",
			MaxDeliveries:   3,
			RetryDelayLevel: 1, // 1 s
			Logger:          quiet,
		})
		if err != nil {
			t.Fatalf("NewConsumer: %v", err)
		}
		return c
	}
	dead := watchDead(t, namesrv, topic)
	stop := run(t, newConsumer())

	t.Run("publish and consume", func(t *testing.T) {
		publish(t, "basic:1", "hello 你好")
		waitFor(t, firstDelivery, "the first delivery", func() bool { return len(s.deliveries("basic:1")) > 0 })
		m := s.deliveries("basic:1")[0]
		if m.Topic != topic || string(m.Body) != "hello 你好" || m.Deliveries != 1 || m.ID == "" {
			t.Errorf("delivered %+v (body %q)", m, m.Body)
		}
	})

	t.Run("same key published five times reaches the handler five times", func(t *testing.T) {
		for range 5 {
			publish(t, "same:1", "x")
		}
		waitFor(t, redelivery, "five deliveries", func() bool { return len(s.deliveries("same:1")) >= 5 })
		ids := map[string]bool{}
		for _, m := range s.deliveries("same:1") {
			ids[m.ID] = true
		}
		if len(ids) != 5 {
			t.Errorf("distinct IDs = %d, want 5", len(ids))
		}
	})

	t.Run("handler failure is redelivered", func(t *testing.T) {
		s.on("fail-once:1", func(_ context.Context, _ mq.Message, call int) error {
			if call == 1 {
				return errors.New("transient")
			}
			return nil
		})
		publish(t, "fail-once:1", "x")
		waitFor(t, redelivery, "the redelivery", func() bool { return len(s.deliveries("fail-once:1")) >= 2 })
		got := s.deliveries("fail-once:1")
		if got[0].ID != got[1].ID || got[1].Deliveries != 2 {
			t.Errorf("deliveries %+v, want the same message with Deliveries 2", got)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		s.on("always-fails:1", func(context.Context, mq.Message, int) error { return errors.New("boom") })
		s.on("permanent:1", func(context.Context, mq.Message, int) error {
			return fmt.Errorf("parse: %w", mq.Permanent(errors.New("corrupt pdf")))
		})
		publish(t, "always-fails:1", "a")
		publish(t, "permanent:1", "p")
		tests := []struct {
			key, body, deliveries, err string
			calls                      int
		}{
			{"permanent:1", "p", "1", "parse: corrupt pdf", 1},
			{"always-fails:1", "a", "3", "boom", 3},
		}
		for _, tt := range tests {
			waitFor(t, firstDelivery, "the dead letter of "+tt.key, func() bool { return dead.get(tt.key) != nil })
			d := dead.get(tt.key)
			first := s.deliveries(tt.key)[0]
			if string(d.Body) != tt.body || d.GetProperty(rocketmq.PropDeliveries) != tt.deliveries ||
				d.GetProperty(rocketmq.PropError) != tt.err || d.GetProperty(rocketmq.PropGroup) != group ||
				d.GetProperty(rocketmq.PropOriginID) != first.ID {
				t.Errorf("%s: dead letter body %q properties %v", tt.key, d.Body, d.GetProperties())
			}
			if n := len(s.deliveries(tt.key)); n != tt.calls {
				t.Errorf("%s: handler calls = %d, want %d", tt.key, n, tt.calls)
			}
		}
		// A redelivery would come within about a second; none may follow.
		time.Sleep(3 * time.Second)
		for _, tt := range tests {
			if n := len(s.deliveries(tt.key)); n != tt.calls {
				t.Errorf("%s: handler calls after dead-lettering = %d, want %d", tt.key, n, tt.calls)
			}
		}
	})

	t.Run("consumer killed mid-message", func(t *testing.T) {
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
		publish(t, "killed:1", "x")
		select {
		case <-started:
		case <-time.After(redelivery):
			t.Fatal("the message never reached the handler")
		}
		stop()
		if n := len(s.deliveries("killed:1")); n != 1 {
			t.Fatalf("deliveries before the restart = %d", n)
		}
		run(t, newConsumer())
		waitFor(t, firstDelivery, "the redelivery to a new consumer", func() bool { return len(s.deliveries("killed:1")) >= 2 })
	})
}

func TestUnreachable(t *testing.T) {
	prod, err := rocketmq.NewProducer("127.0.0.1:1", rocketmq.ProducerOptions{})
	if err != nil {
		t.Fatalf("NewProducer must not need the broker: %v", err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = prod.Publish(ctx, "nowhere", "k", []byte("x"))
	if err == nil {
		t.Fatal("Publish succeeded with no NameServer")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish took %v, want it bounded by its 2 s context", d)
	}
	if err := prod.Ping(ctx); err == nil {
		t.Error("Ping succeeded with no NameServer")
	}

	// A consumer keeps retrying its start and stops cleanly.
	c, err := rocketmq.NewConsumer("127.0.0.1:1", "g", "t", func(context.Context, mq.Message) error { return nil },
		rocketmq.ConsumerOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	start = time.Now()
	if err := c.Run(rctx); err != nil {
		t.Errorf("Run = %v, want nil when its context ends", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	if err := c.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
}

func TestOptionsValidate(t *testing.T) {
	h := func(context.Context, mq.Message) error { return nil }
	for _, tc := range []struct{ name, namesrv, group, topic string }{
		{"no namesrv", " ; ", "g", "t"}, {"no group", "127.0.0.1:9876", "", "t"}, {"no topic", "127.0.0.1:9876", "g", ""},
	} {
		if _, err := rocketmq.NewConsumer(tc.namesrv, tc.group, tc.topic, h, rocketmq.ConsumerOptions{}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if got := rocketmq.DeadTopic("ragent-document-ingest"); !strings.HasSuffix(got, "-dead") {
		t.Errorf("DeadTopic = %q", got)
	}
}
