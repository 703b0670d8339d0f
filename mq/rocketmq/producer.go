package rocketmq

import (
	"cmp"
	"context"
	"fmt"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/ragent-go/ragent/mq"
)

// Producer defaults.
const (
	DefaultProducerGroup = "ragent-producer"
	DefaultRetries       = 2
	DefaultSendTimeout   = 3 * time.Second
)

// ProducerConfig configures a Producer. Zero values select the defaults.
type ProducerConfig struct {
	Instance    string        // instance ID, part of the client's instance name
	Group       string        // producer group; default DefaultProducerGroup
	Retries     int           // resends to another queue after a failure; default 2
	SendTimeout time.Duration // per attempt; default 3 s
}

// Producer sends messages synchronously: Publish returns once the broker has
// stored the message.
type Producer struct {
	p     rmq.Producer
	addrs []string
}

var (
	_ mq.Producer = (*Producer)(nil)
	_ mq.Pinger   = (*Producer)(nil)
)

// NewProducer starts a producer on the NameServer(s) namesrv
// ("host:port", several separated by ';'). Starting does not contact the
// broker, so it succeeds while RocketMQ is down; Publish reports that.
// Close releases it.
func NewProducer(namesrv string, cfg ProducerConfig) (*Producer, error) {
	addrs, err := splitAddrs(namesrv)
	if err != nil {
		return nil, err
	}
	if cfg.Group == "" {
		cfg.Group = DefaultProducerGroup
	}
	cfg.Retries = cmp.Or(max(cfg.Retries, 0), DefaultRetries)
	cfg.SendTimeout = cmp.Or(max(cfg.SendTimeout, 0), DefaultSendTimeout)
	p, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(addrs)),
		producer.WithGroupName(cfg.Group),
		producer.WithInstanceName(instanceName(cfg.Instance, "producer")),
		producer.WithRetry(cfg.Retries),
		producer.WithSendMsgTimeout(cfg.SendTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("rocketmq: start producer: %w", err)
	}
	return &Producer{p: p, addrs: addrs}, nil
}

// Publish sends the message with key as its RocketMQ Keys (searchable in the
// console). It returns when ctx ends even if the client is still trying; such
// a send may still land, which at-least-once delivery already allows for.
func (p *Producer) Publish(ctx context.Context, topic, key string, body []byte) error {
	msg := primitive.NewMessage(topic, body)
	msg.WithKeys([]string{key})
	return send(ctx, p.p, msg)
}

// send runs SendSync without letting it outlive ctx: the client does not
// consult ctx while it looks up routes.
func send(ctx context.Context, p rmq.Producer, msg *primitive.Message) error {
	done := make(chan error, 1)
	go func() {
		res, err := p.SendSync(ctx, msg)
		if err == nil && res.Status != primitive.SendOK {
			err = fmt.Errorf("send status %d", res.Status)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("rocketmq: publish to %s: %w", msg.Topic, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rocketmq: publish to %s: %w", msg.Topic, ctx.Err())
	}
}

// Ping reports whether a NameServer accepts connections.
func (p *Producer) Ping(ctx context.Context) error { return ping(ctx, p.addrs) }

// Close shuts the producer down.
func (p *Producer) Close() error { return p.p.Shutdown() }
