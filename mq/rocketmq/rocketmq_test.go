package rocketmq_test

import (
	"context"
	"log/slog"
	"net"
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
	"github.com/ragent-go/ragent/mq/mqtest"
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

func TestMain(m *testing.M) {
	rocketmq.SetClientLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	os.Exit(m.Run())
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

// TestRocketMQ runs the mq contract suite against the real broker with one topic
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

	prod, err := rocketmq.NewProducer(namesrv, rocketmq.ProducerConfig{Instance: "test"})
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

	newConsumer := func(h mq.Handler) *rocketmq.Consumer {
		c, err := rocketmq.NewConsumer(namesrv, group, topic, h, rocketmq.ConsumerConfig{
			Instance:        "test",
			MaxDeliveries:   mqtest.MaxDeliveries,
			RetryDelayLevel: 1, // 1 s
		})
		if err != nil {
			t.Fatalf("NewConsumer: %v", err)
		}
		return c
	}
	dead := watchDead(t, namesrv, topic)
	mqtest.Run(t, mqtest.Driver{
		Group:   group,
		Publish: publish,
		Start:   func(t *testing.T, h mq.Handler) func() { return testenv.Run(t, newConsumer(h).Run) },
		DeadLetter: func(_ *testing.T, key string) *mqtest.DeadLetter {
			d := dead.get(key)
			if d == nil {
				return nil
			}
			return &mqtest.DeadLetter{Key: d.GetKeys(), Body: string(d.Body), Group: d.GetProperty(rocketmq.PropGroup),
				OriginID: d.GetProperty(rocketmq.PropOriginID), Deliveries: d.GetProperty(rocketmq.PropDeliveries),
				Error: d.GetProperty(rocketmq.PropError)}
		},
		FirstDelivery: firstDelivery,
		Redelivery:    redelivery,
		// A redelivery comes within about a second.
		Quiet: 3 * time.Second,
	})
}

func TestUnreachable(t *testing.T) {
	prod, err := rocketmq.NewProducer("127.0.0.1:1", rocketmq.ProducerConfig{})
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
		rocketmq.ConsumerConfig{})
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
		if _, err := rocketmq.NewConsumer(tc.namesrv, tc.group, tc.topic, h, rocketmq.ConsumerConfig{}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if got := rocketmq.DeadTopic("ragent-document-ingest"); !strings.HasSuffix(got, "-dead") {
		t.Errorf("DeadTopic = %q", got)
	}
}

// TestHostNames: NameServer and broker may be named by host name (a compose
// service name), not only by IP; the client library itself takes IPs only.
func TestHostNames(t *testing.T) {
	namesrv := testenv.RocketMQNamesrv(t)
	byName := func(addr string) string {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%q: %v", addr, err)
		}
		return net.JoinHostPort("localhost", port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := "test-names-" + testenv.RandomSuffix()
	if err := rocketmq.CreateTopic(ctx, byName(namesrv), byName(brokerAddr), topic); err != nil {
		t.Fatalf("CreateTopic by host name: %v", err)
	}
	prod, err := rocketmq.NewProducer(byName(namesrv), rocketmq.ProducerConfig{Instance: "test-names"})
	if err != nil {
		t.Fatalf("NewProducer by host name: %v", err)
	}
	t.Cleanup(func() { prod.Close() })
	if err := prod.Publish(ctx, topic, "k", []byte("v")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if _, err := rocketmq.NewConsumer("no-such-host.invalid:9876", "g", topic, nil, rocketmq.ConsumerConfig{}); err == nil {
		t.Fatal("NewConsumer with an unresolvable NameServer: no error")
	}
}
