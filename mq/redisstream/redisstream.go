// Package redisstream is the Redis Streams driver of package mq, the default
// queue for a single machine (RAGENT_MQ_DRIVER=redis).
//
// A topic is the stream {prefix}mq:{topic} and its dead letters are the
// stream {prefix}mq:{topic}:dead. The braces around the topic are literal: they
// form a Redis Cluster hash tag, so a topic and its dead-letter stream live in
// the same slot and a message can be dead-lettered and acknowledged in one
// MULTI. Streams are capped with MAXLEN ~ (DefaultMaxLen unless configured):
// an entry trimmed while still pending is lost, so the cap must stay far above
// any realistic backlog.
//
// Consumers use a consumer group per logical consumer (e.g. the ingestion
// worker) and a consumer name per instance. New entries are read with
// XREADGROUP; entries a failed handler or a dead instance left pending are
// taken over with XAUTOCLAIM once they have been idle longer than the
// visibility timeout. While a handler runs, its entry is re-claimed (XCLAIM
// JUSTID) every third of the visibility timeout, so a long but healthy handler
// is never mistaken for a dead one: the visibility timeout bounds how long a
// crash or a failure goes unnoticed, not how long work may take. The delivery
// count is Redis's own (XPENDING); after MaxDeliveries the entry is copied to
// the dead-letter stream with the error and acknowledged.
package redisstream

import (
	"cmp"
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/mq"
)

// DefaultMaxLen is the approximate cap of a topic stream and of its dead
// letters.
const DefaultMaxLen = 100_000

// Field names of a stream entry. Dead letters add the fields below them.
const (
	fieldKey        = "key"
	fieldBody       = "body"
	fieldID         = "id"         // the entry's ID in the topic stream
	fieldGroup      = "group"      // the consumer group that gave up
	fieldDeliveries = "deliveries" // deliveries before it gave up
	fieldError      = "error"      // the last error
)

// StreamKey returns the stream that holds topic's messages.
func StreamKey(prefix, topic string) string { return prefix + "mq:{" + topic + "}" }

// DeadKey returns the stream that holds topic's dead letters.
func DeadKey(prefix, topic string) string { return StreamKey(prefix, topic) + ":dead" }

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	Prefix string // key prefix (RAGENT_REDIS_PREFIX)
	MaxLen int64  // approximate stream cap; 0 means DefaultMaxLen
}

// Producer publishes messages with XADD.
type Producer struct {
	rdb    redis.UniversalClient
	prefix string
	maxLen int64
}

var (
	_ mq.Producer = (*Producer)(nil)
	_ mq.Pinger   = (*Producer)(nil)
	_ mq.Tracker  = (*Producer)(nil)
)

// NewProducer returns a Producer that writes through rdb.
func NewProducer(rdb redis.UniversalClient, cfg ProducerConfig) *Producer {
	cfg.MaxLen = cmp.Or(max(cfg.MaxLen, 0), DefaultMaxLen)
	return &Producer{rdb: rdb, prefix: cfg.Prefix, maxLen: cfg.MaxLen}
}

// Publish appends the message to the topic's stream.
func (p *Producer) Publish(ctx context.Context, topic, key string, body []byte) error {
	_, err := p.PublishTracked(ctx, topic, key, body)
	return err
}

// PublishTracked appends the message to the topic's stream and returns its
// entry ID, for Holds. Redis acknowledges an XADD before any replica has it,
// so a failover may promote a replica that never got the entry: the caller
// (the outbox relay) asks Holds later and publishes again what was lost.
func (p *Producer) PublishTracked(ctx context.Context, topic, key string, body []byte) (string, error) {
	id, err := p.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: StreamKey(p.prefix, topic),
		MaxLen: p.maxLen,
		Approx: true,
		Values: []any{fieldKey, key, fieldBody, body},
	}).Result()
	if err != nil {
		return "", fmt.Errorf("redisstream: publish to %s: %w", topic, err)
	}
	return id, nil
}

// Holds reports whether topic's stream still has the entry PublishTracked
// returned. Consumed entries stay (acknowledged, not deleted) until the
// MAXLEN trim, so false means lost, or trimmed long after its delivery.
func (p *Producer) Holds(ctx context.Context, topic, id string) (bool, error) {
	entries, err := p.rdb.XRangeN(ctx, StreamKey(p.prefix, topic), id, id, 1).Result()
	if err != nil {
		return false, fmt.Errorf("redisstream: look up %s in %s: %w", id, topic, err)
	}
	return len(entries) > 0, nil
}

// Ping reports whether Redis answers.
func (p *Producer) Ping(ctx context.Context) error {
	if err := p.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstream: ping: %w", err)
	}
	return nil
}
