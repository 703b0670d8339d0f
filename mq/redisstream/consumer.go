package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
	"github.com/ragent-go/ragent/mq"
)

// Consumer defaults.
const (
	DefaultConcurrency       = 4
	DefaultVisibilityTimeout = time.Minute
	DefaultMaxDeliveries     = 5
	DefaultBlock             = time.Second
)

// Bounds of the pause after a Redis error, so a dead Redis is retried
// promptly at first and then without spinning.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// settleTimeout bounds an acknowledgement or a dead-lettering. They run on a
// context detached from Run's, so that a handler that finished just as
// shutdown began is still acknowledged.
const settleTimeout = 5 * time.Second

// ConsumerConfig configures a Consumer. Zero values select the defaults.
type ConsumerConfig struct {
	Prefix string // key prefix (RAGENT_REDIS_PREFIX)
	// Consumer is this instance's name inside the group (the instance ID);
	// default host-pid. Two live consumers must not share a name.
	Consumer string
	// Concurrency bounds the handlers running at once; default 4.
	Concurrency int
	// VisibilityTimeout is how long an entry may stay unacknowledged without
	// a heartbeat before another consumer takes it over (after a handler
	// failure or a crash); default 1 minute.
	VisibilityTimeout time.Duration
	// MaxDeliveries is the number of deliveries after which a failing entry is
	// dead-lettered; default 5.
	MaxDeliveries int
	// Block is how long one XREADGROUP waits for new entries. It also bounds
	// how long Run takes to notice that its context ended; default 1 s.
	Block time.Duration
	// ReclaimInterval is the pause between two XAUTOCLAIM scans; default a
	// quarter of the visibility timeout, at most 15 s.
	ReclaimInterval time.Duration
	Logger          *slog.Logger // nil discards
	Metrics         *mq.Metrics  // nil counts nothing
}

// Consumer reads one topic for one consumer group; see the package
// documentation for the delivery mechanics.
type Consumer struct {
	rdb     redis.UniversalClient
	group   string
	topic   string
	stream  string
	dead    string
	handler mq.Handler
	cfg     ConsumerConfig
	log     *slog.Logger
}

var (
	_ mq.Consumer = (*Consumer)(nil)
	_ mq.Pinger   = (*Consumer)(nil)
)

// NewConsumer returns a Consumer that delivers topic's messages to h on
// behalf of group.
func NewConsumer(rdb redis.UniversalClient, group, topic string, h mq.Handler, cfg ConsumerConfig) (*Consumer, error) {
	if group == "" || topic == "" || h == nil {
		return nil, errors.New("redisstream: consumer needs a group, a topic and a handler")
	}
	if cfg.Consumer == "" {
		host, _ := os.Hostname()
		cfg.Consumer = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), DefaultConcurrency)
	cfg.VisibilityTimeout = cmp.Or(max(cfg.VisibilityTimeout, 0), DefaultVisibilityTimeout)
	cfg.MaxDeliveries = cmp.Or(max(cfg.MaxDeliveries, 0), DefaultMaxDeliveries)
	cfg.Block = cmp.Or(max(cfg.Block, 0), DefaultBlock)
	cfg.ReclaimInterval = cmp.Or(max(cfg.ReclaimInterval, 0), min(cfg.VisibilityTimeout/4, 15*time.Second))
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Consumer{
		rdb:     rdb,
		group:   group,
		topic:   topic,
		stream:  StreamKey(cfg.Prefix, topic),
		dead:    DeadKey(cfg.Prefix, topic),
		handler: h,
		cfg:     cfg,
		log: cfg.Logger.With("component", "mq", "driver", "redis",
			"topic", topic, "group", group, "consumer", cfg.Consumer),
	}, nil
}

// Ping reports whether Redis answers.
func (c *Consumer) Ping(ctx context.Context) error {
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstream: ping: %w", err)
	}
	return nil
}

// Run consumes until ctx ends and returns nil once every in-flight handler
// has returned. Redis errors never end it: it logs them, backs off and
// retries, so ingestion resumes by itself when Redis comes back.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.ensureGroupUntilDone(ctx) {
		return nil
	}
	// slots bounds the running handlers; both loops take a slot per entry
	// before they ask Redis for it, so nothing is claimed that cannot run.
	slots := make(chan struct{}, c.cfg.Concurrency)
	var handlers, loops sync.WaitGroup
	loops.Go(func() { c.readLoop(ctx, slots, &handlers) })
	loops.Go(func() { c.reclaimLoop(ctx, slots, &handlers) })
	loops.Wait()
	handlers.Wait()
	c.forgetConsumer()
	return nil
}

// ensureGroupUntilDone creates the group (and the stream) if needed, retrying
// until it succeeds or ctx ends. The group starts at the beginning of the
// stream so that messages published before the first consumer ever ran are
// not skipped.
func (c *Consumer) ensureGroupUntilDone(ctx context.Context) bool {
	bo := mq.Backoff{Min: minBackoff, Max: maxBackoff}
	for {
		err := c.ensureGroup(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.log.Warn("mq: create consumer group", "err", err)
		if !bo.Wait(ctx) {
			return false
		}
	}
}

func (c *Consumer) ensureGroup(ctx context.Context) error {
	err := c.rdb.XGroupCreateMkStream(ctx, c.stream, c.group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	return nil
}

// afterError logs err and pauses. When the group has vanished (the stream was
// deleted) it recreates it. It reports false when ctx ended.
func (c *Consumer) afterError(ctx context.Context, bo *mq.Backoff, what string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	c.log.Warn("mq: "+what, "err", err)
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		if gerr := c.ensureGroup(ctx); gerr != nil && ctx.Err() == nil {
			c.log.Warn("mq: recreate consumer group", "err", gerr)
		}
	}
	return bo.Wait(ctx)
}

// readLoop takes new entries with XREADGROUP as handler slots free up.
func (c *Consumer) readLoop(ctx context.Context, slots chan struct{}, handlers *sync.WaitGroup) {
	bo := mq.Backoff{Min: minBackoff, Max: maxBackoff}
	for {
		n := acquire(ctx, slots)
		if n == 0 {
			return
		}
		res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group:    c.group,
			Consumer: c.cfg.Consumer,
			Streams:  []string{c.stream, ">"},
			Count:    int64(n),
			Block:    c.cfg.Block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			release(slots, n)
			continue
		}
		if err != nil {
			release(slots, n)
			if !c.afterError(ctx, &bo, "read", err) {
				return
			}
			continue
		}
		bo.Reset()
		var msgs []redis.XMessage
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		release(slots, n-len(msgs))
		if ctx.Err() != nil {
			// Delivered to us as shutdown began: leave them pending for
			// another consumer's XAUTOCLAIM rather than start work now.
			release(slots, len(msgs))
			return
		}
		for _, xm := range msgs {
			c.dispatch(ctx, xm, 1, slots, handlers)
		}
	}
}

// reclaimLoop takes over entries idle past the visibility timeout: those a
// handler failed on, and those of consumers that died.
func (c *Consumer) reclaimLoop(ctx context.Context, slots chan struct{}, handlers *sync.WaitGroup) {
	t := time.NewTicker(c.cfg.ReclaimInterval)
	defer t.Stop()
	bo := mq.Backoff{Min: minBackoff, Max: maxBackoff}
	for {
		if err := c.reclaim(ctx, slots, handlers); err != nil {
			if !c.afterError(ctx, &bo, "reclaim", err) {
				return
			}
			continue
		}
		bo.Reset()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reclaim scans the whole pending list once.
func (c *Consumer) reclaim(ctx context.Context, slots chan struct{}, handlers *sync.WaitGroup) error {
	start := "0-0"
	for {
		n := acquire(ctx, slots)
		if n == 0 {
			return nil
		}
		msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream:   c.stream,
			Group:    c.group,
			Consumer: c.cfg.Consumer,
			MinIdle:  c.cfg.VisibilityTimeout,
			Start:    start,
			Count:    int64(n),
		}).Result()
		if err != nil {
			release(slots, n)
			return err
		}
		release(slots, n-len(msgs))
		deliveries, err := c.deliveries(ctx, msgs)
		if err != nil {
			// The entries are ours now but idle again from this moment:
			// the next scan after the visibility timeout retries them.
			release(slots, len(msgs))
			return err
		}
		for _, xm := range msgs {
			d, pending := deliveries[xm.ID]
			switch {
			case !pending:
				// Acknowledged meanwhile by the slow consumer we took it from.
				release(slots, 1)
			case ctx.Err() != nil:
				release(slots, 1)
			case d > c.cfg.MaxDeliveries:
				// Its last delivery ended in a crash or was never reported:
				// there is no handler error to record.
				c.deadLetter(ctx, xm, d, fmt.Errorf("abandoned after %d deliveries", d-1))
				release(slots, 1)
			default:
				c.dispatch(ctx, xm, d, slots, handlers)
			}
		}
		if next == "0-0" || next == "" {
			return nil
		}
		start = next
	}
}

// deliveries returns the delivery counts of msgs, which this consumer has
// just claimed, keyed by entry ID.
func (c *Consumer) deliveries(ctx context.Context, msgs []redis.XMessage) (map[string]int, error) {
	out := make(map[string]int, len(msgs))
	if len(msgs) == 0 {
		return out, nil
	}
	// XAUTOCLAIM scans the pending list in ID order, so the claimed IDs
	// span [first, last].
	pend, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream:   c.stream,
		Group:    c.group,
		Start:    msgs[0].ID,
		End:      msgs[len(msgs)-1].ID,
		Count:    int64(len(msgs)),
		Consumer: c.cfg.Consumer,
	}).Result()
	if err != nil {
		return nil, err
	}
	for _, p := range pend {
		out[p.ID] = int(p.RetryCount)
	}
	return out, nil
}

// dispatch runs the handler for xm in its own goroutine; the caller holds one
// slot for it, which the goroutine releases.
func (c *Consumer) dispatch(ctx context.Context, xm redis.XMessage, deliveries int, slots chan struct{}, handlers *sync.WaitGroup) {
	handlers.Go(func() {
		defer release(slots, 1)
		c.handle(ctx, xm, deliveries)
	})
}

func (c *Consumer) handle(ctx context.Context, xm redis.XMessage, deliveries int) {
	log := c.log.With("id", xm.ID, "deliveries", deliveries)
	m, err := c.decode(xm, deliveries)
	if err != nil {
		c.deadLetter(ctx, xm, deliveries, err)
		return
	}
	log = log.With("key", m.Key)

	// The heartbeat stops with Run's context, like the handler's work.
	every := c.cfg.VisibilityTimeout / 3
	beat := lease.Every(ctx, every, func(bctx context.Context) time.Duration {
		if ctx.Err() != nil {
			return 0
		}
		c.heartbeat(bctx, xm.ID)
		return every
	})
	outcome, err := mq.Deliver(ctx, c.handler, m, c.cfg.MaxDeliveries, log)
	beat.Stop()
	c.cfg.Metrics.Delivered(m, outcome)

	switch outcome { // Redeliver: left pending for the reclaim scan
	case mq.Ack:
		c.ack(ctx, xm.ID, log)
	case mq.DeadLetter:
		c.deadLetter(ctx, xm, deliveries, err)
	}
}

func (c *Consumer) decode(xm redis.XMessage, deliveries int) (mq.Message, error) {
	key, kok := xm.Values[fieldKey].(string)
	body, bok := xm.Values[fieldBody].(string)
	if !kok || !bok {
		return mq.Message{}, mq.Permanent(fmt.Errorf("malformed stream entry %s: want fields %q and %q", xm.ID, fieldKey, fieldBody))
	}
	return mq.Message{Topic: c.topic, Key: key, Body: []byte(body), ID: xm.ID, Deliveries: deliveries}, nil
}

// heartbeat keeps the entry's idle time low while its handler runs, so that
// no other consumer's XAUTOCLAIM takes it over. JUSTID leaves the delivery
// count alone.
func (c *Consumer) heartbeat(ctx context.Context, id string) {
	err := c.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream:   c.stream,
		Group:    c.group,
		Consumer: c.cfg.Consumer,
		Messages: []string{id},
	}).Err()
	if err != nil && ctx.Err() == nil {
		c.log.Warn("mq: heartbeat", "id", id, "err", err)
	}
}

func (c *Consumer) ack(ctx context.Context, id string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := c.rdb.XAck(ctx, c.stream, c.group, id).Err(); err != nil {
		log.Warn("mq: ack failed; the message will be redelivered", "err", err)
	}
}

// deadLetter copies the entry with the reason to the dead-letter stream and
// acknowledges it, atomically (both keys share a hash slot).
func (c *Consumer) deadLetter(ctx context.Context, xm redis.XMessage, deliveries int, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	values := make(map[string]any, len(xm.Values)+4)
	for k, v := range xm.Values {
		values[k] = v
	}
	values[fieldID] = xm.ID
	values[fieldGroup] = c.group
	values[fieldDeliveries] = strconv.Itoa(deliveries)
	values[fieldError] = cause.Error()
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: c.dead, MaxLen: DefaultMaxLen, Approx: true, Values: values})
		p.XAck(ctx, c.stream, c.group, xm.ID)
		return nil
	})
	if err != nil {
		c.log.Error("mq: dead-lettering failed; the message will be redelivered", "id", xm.ID, "err", err)
		return
	}
	c.log.Warn("mq: dead-lettered", "id", xm.ID, "deliveries", deliveries, "err", cause)
}

// forgetConsumer removes this consumer's name from the group when it holds no
// pending entry, so that names of past instances do not pile up. Entries it
// still holds keep the name alive until another consumer claims them.
func (c *Consumer) forgetConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	pend, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: c.stream, Group: c.group, Start: "-", End: "+", Count: 1, Consumer: c.cfg.Consumer,
	}).Result()
	if err != nil || len(pend) > 0 {
		return
	}
	_ = c.rdb.XGroupDelConsumer(ctx, c.stream, c.group, c.cfg.Consumer).Err()
}

// acquire blocks until at least one slot is free, takes every free slot and
// returns how many it took; 0 means ctx ended.
func acquire(ctx context.Context, slots chan struct{}) int {
	select {
	case <-ctx.Done():
		return 0
	case slots <- struct{}{}:
	}
	n := 1
	for n < cap(slots) {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func release(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// Backlog reports the group's lag (entries not yet delivered to it) and its
// pending entries (delivered, not acknowledged), from XINFO GROUPS. A group
// that does not exist yet has the whole stream as its lag.
func (c *Consumer) Backlog(ctx context.Context) (mq.Backlog, error) {
	groups, err := c.rdb.XInfoGroups(ctx, c.stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return mq.Backlog{}, nil
		}
		return mq.Backlog{}, fmt.Errorf("redisstream: backlog of %s: %w", c.topic, err)
	}
	for _, g := range groups {
		if g.Name == c.group {
			return mq.Backlog{Lag: max(g.Lag, 0), Pending: g.Pending}, nil
		}
	}
	n, err := c.rdb.XLen(ctx, c.stream).Result()
	if err != nil {
		return mq.Backlog{}, fmt.Errorf("redisstream: backlog of %s: %w", c.topic, err)
	}
	return mq.Backlog{Lag: n}, nil
}
