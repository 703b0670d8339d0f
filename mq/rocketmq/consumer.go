package rocketmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/ragent-go/ragent/mq"
)

// Consumer defaults.
const (
	DefaultConcurrency   = 4
	DefaultMaxDeliveries = 5
)

// ConsumerConfig configures a Consumer. Zero values select the defaults.
type ConsumerConfig struct {
	Instance string // instance ID, part of the client's instance name
	// Concurrency bounds the handlers running at once per subscribed topic
	// (the topic and the group's retry topic each get this many); default 4.
	Concurrency int
	// MaxDeliveries is the delivery on which a failing message is
	// dead-lettered instead of retried; default 5.
	MaxDeliveries int
	// RetryDelayLevel picks the broker's delay before a redelivery from its
	// messageDelayLevel table (1 = 1 s, 2 = 5 s, 3 = 10 s, 4 = 30 s, …).
	// 0 lets the broker grow the delay with each retry (10 s, 30 s, 1 min,
	// 2 min, …), the right choice in production.
	RetryDelayLevel int
	Logger          *slog.Logger // nil discards
	Metrics         *mq.Metrics  // nil counts nothing
}

// Consumer is a clustering push consumer of one topic for one group. A new
// group starts at the first offset of the topic, so messages published before
// any consumer ran are not skipped; later the group's committed offsets rule.
//
// On shutdown it first stops the client, which drops its queues and persists
// offsets of finished messages only, then cancels the handlers' context and
// waits for them: whatever they did not finish is redelivered to the group.
type Consumer struct {
	addrs   []string
	group   string
	topic   string
	handler mq.Handler
	cfg     ConsumerConfig
	log     *slog.Logger

	// handlerCtx is what handlers see; cancelled after the client stops.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	dead          rmq.Producer // publishes dead letters; set while running

	ran      atomic.Bool
	mu       sync.Mutex
	stopping bool // no new handler may start
	inflight sync.WaitGroup
}

var (
	_ mq.Consumer = (*Consumer)(nil)
	_ mq.Pinger   = (*Consumer)(nil)
)

// NewConsumer returns a Consumer of topic for group on the NameServer(s)
// namesrv; nothing connects until Run.
func NewConsumer(namesrv, group, topic string, h mq.Handler, cfg ConsumerConfig) (*Consumer, error) {
	addrs, err := splitAddrs(namesrv)
	if err != nil {
		return nil, err
	}
	if group == "" || topic == "" || h == nil {
		return nil, errors.New("rocketmq: consumer needs a group, a topic and a handler")
	}
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), DefaultConcurrency)
	cfg.MaxDeliveries = cmp.Or(max(cfg.MaxDeliveries, 0), DefaultMaxDeliveries)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{
		addrs:   addrs,
		group:   group,
		topic:   topic,
		handler: h,
		cfg:     cfg,
		log:     cfg.Logger.With("component", "mq", "driver", "rocketmq", "topic", topic, "group", group),
	}, nil
}

// Ping reports whether a NameServer accepts connections.
func (c *Consumer) Ping(ctx context.Context) error { return ping(ctx, c.addrs) }

// Run consumes until ctx ends. A Consumer runs once. While RocketMQ cannot be
// reached (or the topic does not exist yet) it logs, backs off and tries
// again, so ingestion resumes by itself when the queue returns.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("rocketmq: a Consumer runs once")
	}
	c.handlerCtx, c.cancelHandler = context.WithCancel(context.WithoutCancel(ctx))
	defer c.cancelHandler()

	dead, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(c.addrs)),
		producer.WithGroupName(c.group+"-dead-letters"),
		producer.WithInstanceName(instanceName(c.cfg.Instance, "dead-letters")),
		producer.WithRetry(DefaultRetries),
	)
	if err != nil {
		return fmt.Errorf("rocketmq: dead-letter producer: %w", err)
	}
	if err := dead.Start(); err != nil {
		return fmt.Errorf("rocketmq: start dead-letter producer: %w", err)
	}
	defer dead.Shutdown()
	c.dead = dead

	pc := c.startUntilDone(ctx)
	if pc == nil {
		return nil
	}
	<-ctx.Done()

	// Stop the client first: it marks its queues dropped, so results that
	// arrive later are neither committed nor sent back, and persists the
	// offsets of finished messages only.
	if err := pc.Shutdown(); err != nil {
		c.log.Warn("mq: consumer shutdown", "err", err)
	}
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.cancelHandler()
	c.inflight.Wait()
	return nil
}

// startUntilDone starts a push consumer, retrying with backoff until it
// succeeds or ctx ends (nil).
func (c *Consumer) startUntilDone(ctx context.Context) rmq.PushConsumer {
	bo := mq.Backoff{Min: 500 * time.Millisecond, Max: 15 * time.Second}
	for {
		pc, err := c.start()
		if err == nil {
			return pc
		}
		c.log.Warn("mq: start consumer; retrying", "err", err)
		if !bo.Wait(ctx) {
			return nil
		}
	}
}

func (c *Consumer) start() (rmq.PushConsumer, error) {
	pc, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(c.addrs)),
		consumer.WithGroupName(c.group),
		consumer.WithInstance(instanceName(c.cfg.Instance, "consumer")),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumeGoroutineNums(c.cfg.Concurrency),
		consumer.WithConsumeMessageBatchMaxSize(1),
	)
	if err != nil {
		return nil, err
	}
	err = pc.Subscribe(c.topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, c.consume)
	if err == nil {
		err = pc.Start()
	}
	if err != nil {
		_ = pc.Shutdown()
		return nil, err
	}
	return pc, nil
}

// consume is the client's callback; batches hold one message
// (ConsumeMessageBatchMaxSize 1), so one result settles one message.
func (c *Consumer) consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return consumer.ConsumeRetryLater, nil
	}
	c.inflight.Add(1)
	c.mu.Unlock()
	defer c.inflight.Done()

	for _, msg := range msgs {
		if !c.consumeOne(ctx, msg) {
			return consumer.ConsumeRetryLater, nil
		}
	}
	return consumer.ConsumeSuccess, nil
}

// consumeOne reports whether msg is settled (handled or dead-lettered).
func (c *Consumer) consumeOne(clientCtx context.Context, msg *primitive.MessageExt) bool {
	// MsgId is the producer-assigned unique key, which the broker keeps when
	// it sends a message back for a retry (unlike the offset message ID).
	m := mq.Message{
		Topic:      c.topic,
		Key:        msg.GetKeys(),
		Body:       msg.Body,
		ID:         msg.MsgId,
		Deliveries: int(msg.ReconsumeTimes) + 1,
	}
	log := c.log.With("id", m.ID, "key", m.Key, "deliveries", m.Deliveries)
	outcome, err := mq.Deliver(c.handlerCtx, c.handler, m, c.cfg.MaxDeliveries, log)
	c.cfg.Metrics.Delivered(m, outcome)
	switch outcome {
	case mq.Ack:
		return true
	case mq.DeadLetter:
		return c.deadLetter(m, err, log)
	}
	if cc, ok := primitive.GetConcurrentlyCtx(clientCtx); ok && c.cfg.RetryDelayLevel > 0 {
		cc.DelayLevelWhenNextConsume = c.cfg.RetryDelayLevel
	}
	return false
}

// deadLetter publishes m to the dead-letter topic; false means it must be
// retried instead.
func (c *Consumer) deadLetter(m mq.Message, cause error, log *slog.Logger) bool {
	msg := primitive.NewMessage(DeadTopic(c.topic), m.Body)
	msg.WithKeys([]string{m.Key})
	msg.WithProperty(PropOriginID, m.ID)
	msg.WithProperty(PropGroup, c.group)
	msg.WithProperty(PropDeliveries, strconv.Itoa(m.Deliveries))
	msg.WithProperty(PropError, propertyValue(cause.Error()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*DefaultSendTimeout)
	defer cancel()
	if err := send(ctx, c.dead, msg); err != nil {
		log.Error("mq: dead-lettering failed; the message will be redelivered", "err", err)
		return false
	}
	return true
}

// propertyValue drops control characters: RocketMQ encodes properties with
// \x01 and \x02 as separators, so an error text must not contain them.
func propertyValue(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
