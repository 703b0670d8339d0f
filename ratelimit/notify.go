package ratelimit

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// notifier owns one Pub/Sub subscription per limiter and fans each
// notification out to the local waiters. Waking is coalesced: a waiter's
// wake channel holds at most one signal, so a burst of releases costs each
// waiter one claim attempt, while count records how many notifications the
// burst held (a waiter uses it to skip claims that cannot succeed yet).
type notifier struct {
	rdb     redis.UniversalClient
	channel string
	enabled bool
	log     *slog.Logger

	mu      sync.Mutex
	waiters map[*waiter]struct{}

	ready     chan struct{} // closed once the first subscription is confirmed
	readyOnce sync.Once
}

type waiter struct {
	wake  chan struct{}
	count atomic.Int64 // notifications since the waiter last looked
	last  atomic.Int64 // Redis TIME (µs) carried by the latest notification
}

func newNotifier(rdb redis.UniversalClient, channel string, enabled bool, log *slog.Logger) *notifier {
	return &notifier{
		rdb: rdb, channel: channel, enabled: enabled, log: log,
		waiters: make(map[*waiter]struct{}),
		ready:   make(chan struct{}),
	}
}

func (n *notifier) add() *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	n.mu.Lock()
	n.waiters[w] = struct{}{}
	n.mu.Unlock()
	return w
}

func (n *notifier) remove(w *waiter) {
	n.mu.Lock()
	delete(n.waiters, w)
	n.mu.Unlock()
}

// broadcast wakes every waiter; at is the notification's Redis time in µs,
// or 0 when unknown.
func (n *notifier) broadcast(at int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w := range n.waiters {
		w.count.Add(1)
		if at > 0 {
			w.last.Store(at)
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// run keeps the subscription until ctx ends. go-redis re-subscribes after a
// lost connection; notifications published meanwhile are lost, so every
// (re)subscription wakes all waiters once, and the poll covers the rest.
func (n *notifier) run(ctx context.Context) error {
	if !n.enabled {
		<-ctx.Done()
		return nil
	}
	ps := n.rdb.Subscribe(ctx, n.channel)
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-ch:
			if !ok {
				return nil
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				n.readyOnce.Do(func() { close(n.ready) })
				n.broadcast(0)
			case *redis.Message:
				at, err := strconv.ParseInt(m.Payload, 10, 64)
				if err != nil {
					n.log.Warn("ratelimit: unexpected notification", "channel", n.channel, "payload", m.Payload)
				}
				n.broadcast(at)
			}
		}
	}
}
