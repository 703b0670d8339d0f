package redisstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/mq/mqtest"
	"github.com/ragent-go/ragent/mq/redisstream"
)

const (
	topic = "ragent-document-ingest"
	group = "ingest"
	// waitLimit bounds every wait; generous for a noisy 2-core machine.
	waitLimit = 10 * time.Second
)

// fixture is one topic on the test Redis under a fresh prefix.
type fixture struct {
	rdb    redis.UniversalClient
	prefix string
	prod   *redisstream.Producer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rdb.Del(ctx, redisstream.StreamKey(prefix, topic), redisstream.DeadKey(prefix, topic))
	})
	return &fixture{rdb: rdb, prefix: prefix, prod: redisstream.NewProducer(rdb, redisstream.ProducerConfig{Prefix: prefix})}
}

func (f *fixture) publish(t *testing.T, key, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.prod.Publish(ctx, topic, key, []byte(body)); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// fastOptions shrink every interval so redeliveries happen within a second.
func (f *fixture) fastOptions(name string) redisstream.ConsumerConfig {
	return redisstream.ConsumerConfig{
		Prefix:            f.prefix,
		Consumer:          name,
		VisibilityTimeout: 400 * time.Millisecond,
		ReclaimInterval:   100 * time.Millisecond,
		Block:             100 * time.Millisecond,
		MaxDeliveries:     3,
	}
}

// start runs a consumer until the returned stop function is called or the
// test ends; stop fails the test if Run does not return promptly.
func (f *fixture) start(t *testing.T, h mq.Handler, opts redisstream.ConsumerConfig) (stop func()) {
	t.Helper()
	c, err := redisstream.NewConsumer(f.rdb, group, topic, h, opts)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	return testenv.Run(t, c.Run)
}

func (f *fixture) pending(t *testing.T) int64 {
	t.Helper()
	p, err := f.rdb.XPending(context.Background(), redisstream.StreamKey(f.prefix, topic), group).Result()
	if err != nil {
		t.Fatalf("XPENDING: %v", err)
	}
	return p.Count
}

func (f *fixture) deadLetters(t *testing.T) []redis.XMessage {
	t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), redisstream.DeadKey(f.prefix, topic), "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE dead: %v", err)
	}
	return msgs
}

// recorder is a handler that records every delivery and answers with the
// result of its decide function.
type recorder struct {
	mu     sync.Mutex
	got    []mq.Message
	decide func(ctx context.Context, m mq.Message, call int) error
}

func (r *recorder) handle(ctx context.Context, m mq.Message) error {
	r.mu.Lock()
	r.got = append(r.got, m)
	call := len(r.got)
	r.mu.Unlock()
	if r.decide == nil {
		return nil
	}
	return r.decide(ctx, m, call)
}

func (r *recorder) messages() []mq.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]mq.Message(nil), r.got...)
}

func TestContract(t *testing.T) {
	f := newFixture(t)
	var consumers atomic.Int32
	mqtest.Run(t, mqtest.Driver{
		Group: group,
		Publish: func(t *testing.T, key, body string) {
			t.Helper()
			f.publish(t, key, body)
		},
		Start: func(t *testing.T, h mq.Handler) func() {
			return f.start(t, h, f.fastOptions(fmt.Sprintf("c%d", consumers.Add(1))))
		},
		DeadLetter: func(t *testing.T, key string) *mqtest.DeadLetter {
			for _, m := range f.deadLetters(t) {
				v := m.Values
				if v["key"] == key {
					return &mqtest.DeadLetter{Key: key, Body: v["body"].(string), Group: v["group"].(string),
						OriginID: v["id"].(string), Deliveries: v["deliveries"].(string), Error: v["error"].(string)}
				}
			}
			return nil
		},
		FirstDelivery: waitLimit,
		Redelivery:    waitLimit,
		// Longer than a visibility timeout plus a reclaim interval.
		Quiet: 700 * time.Millisecond,
	})
}

// A message whose consumers keep dying is dead-lettered by the reclaim scan
// without another handler call.
func TestAbandonedPastMaxDeliveriesIsDeadLettered(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "3:1", "x")
	opts := f.fastOptions("dying")
	opts.MaxDeliveries = 1
	started := make(chan struct{})
	first := recorder{decide: func(ctx context.Context, _ mq.Message, _ int) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}}
	stop := f.start(t, first.handle, opts)
	<-started
	stop()

	var second recorder
	opts.Consumer = "heir"
	f.start(t, second.handle, opts)
	testenv.Eventually(t, waitLimit, "a dead letter", func() bool { return len(f.deadLetters(t)) == 1 })
	if n := len(second.messages()); n != 0 {
		t.Errorf("handler calls after max deliveries = %d, want 0", n)
	}
	if v := f.deadLetters(t)[0].Values; v["deliveries"] != "2" || !strings.Contains(v["error"].(string), "abandoned") {
		t.Errorf("dead letter = %v", v)
	}
}

// A handler that runs for several visibility timeouts keeps its message: the
// heartbeat stops another consumer from taking it over.
func TestLongHandlerIsNotRedelivered(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "1:1", "slow")
	slow := recorder{decide: func(ctx context.Context, _ mq.Message, _ int) error {
		select {
		case <-time.After(1500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	f.start(t, slow.handle, f.fastOptions("slow"))
	testenv.Eventually(t, waitLimit, "the slow consumer to start", func() bool { return len(slow.messages()) == 1 })
	var other recorder
	f.start(t, other.handle, f.fastOptions("other"))
	testenv.Eventually(t, waitLimit, "ack", func() bool { return f.pending(t) == 0 })
	if n := len(other.messages()); n != 0 {
		t.Errorf("the other consumer got %d deliveries of a message still in progress", n)
	}
}

func TestConcurrencyIsBounded(t *testing.T) {
	f := newFixture(t)
	for i := range 8 {
		f.publish(t, fmt.Sprintf("%d:1", i), "x")
	}
	var running, peak atomic.Int32
	r := recorder{decide: func(context.Context, mq.Message, int) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
		running.Add(-1)
		return nil
	}}
	opts := f.fastOptions("c1")
	opts.Concurrency = 2
	f.start(t, r.handle, opts)
	testenv.Eventually(t, waitLimit, "eight deliveries", func() bool { return len(r.messages()) == 8 })
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency = %d, want 2", p)
	}
}

// unreachable returns a client for a port where nothing listens, counting the
// commands it attempts. It retries as little as ragent's own client
// (internal/redisconn), so a command's dial retries do not take the whole
// observation window on a loaded machine.
func unreachable(t *testing.T) (redis.UniversalClient, *atomic.Int32) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond,
		DialerRetries: 1, MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	var calls atomic.Int32
	rdb.AddHook(countHook{&calls})
	return rdb, &calls
}

type countHook struct{ n *atomic.Int32 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestRedisUnreachable(t *testing.T) {
	rdb, calls := unreachable(t)
	t.Run("publish fails within its context", func(t *testing.T) {
		p := redisstream.NewProducer(rdb, redisstream.ProducerConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if err := p.Publish(ctx, topic, "k", []byte("x")); err == nil {
			t.Fatal("Publish succeeded on an unreachable Redis")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Publish took %v", d)
		}
		if err := p.Ping(ctx); err == nil {
			t.Error("Ping succeeded on an unreachable Redis")
		}
	})
	t.Run("consumer backs off instead of spinning", func(t *testing.T) {
		calls.Store(0)
		c, err := redisstream.NewConsumer(rdb, group, topic, func(context.Context, mq.Message) error { return nil },
			redisstream.ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run = %v, want nil after its context ends", err)
		}
		// Backoff 0.1+0.2+0.4+0.8 s fits about five attempts in two seconds.
		if n := calls.Load(); n < 2 || n > 10 {
			t.Errorf("commands attempted in 2 s = %d, want a handful (backoff)", n)
		}
	})
}

func TestNewConsumerValidates(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	h := func(context.Context, mq.Message) error { return nil }
	for _, tc := range []struct {
		name, group, topic string
		h                  mq.Handler
	}{{"no group", "", topic, h}, {"no topic", group, "", h}, {"no handler", group, topic, nil}} {
		if _, err := redisstream.NewConsumer(rdb, tc.group, tc.topic, tc.h, redisstream.ConsumerConfig{}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestKeys(t *testing.T) {
	if got := redisstream.StreamKey("ragent:", "ingest"); got != "ragent:mq:{ingest}" {
		t.Errorf("StreamKey = %q", got)
	}
	if got := redisstream.DeadKey("ragent:", "ingest"); got != "ragent:mq:{ingest}:dead" {
		t.Errorf("DeadKey = %q", got)
	}
}

// Within a group each message goes to one consumer; every group sees all.
func TestGroups(t *testing.T) {
	f := newFixture(t)
	const n = 10
	for i := range n {
		f.publish(t, fmt.Sprintf("%d:1", i), "x")
	}
	var a1, a2, b recorder
	for _, c := range []struct {
		group, name string
		r           *recorder
	}{{"group-a", "a1", &a1}, {"group-a", "a2", &a2}, {"group-b", "b1", &b}} {
		opts := f.fastOptions(c.name)
		cons, err := redisstream.NewConsumer(f.rdb, c.group, topic, c.r.handle, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = cons.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	testenv.Eventually(t, waitLimit, "every message in both groups", func() bool {
		return len(a1.messages())+len(a2.messages()) == n && len(b.messages()) == n
	})
	time.Sleep(600 * time.Millisecond) // past a visibility timeout: no duplicates follow
	seen := map[string]int{}
	for _, m := range append(a1.messages(), a2.messages()...) {
		seen[m.Key]++
	}
	if len(seen) != n || len(a1.messages())+len(a2.messages()) != n {
		t.Errorf("group-a deliveries: %d distinct of %d", len(seen), len(a1.messages())+len(a2.messages()))
	}
	if len(b.messages()) != n {
		t.Errorf("group-b deliveries = %d, want %d", len(b.messages()), n)
	}
}
