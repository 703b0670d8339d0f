package ratelimit

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Policy says what a Limiter does when Redis fails.
type Policy int

const (
	// PolicyReject fails the acquire with ErrUnavailable.
	PolicyReject Policy = iota
	// PolicyLocal falls back to an in-process semaphore of this
	// instance's share of MaxConcurrent (local.go), so the instances
	// together stay within it; Redis' own bound holds again once it answers.
	PolicyLocal
)

// ParsePolicy parses the RAGENT_CHAT_LIMITER_ON_REDIS_ERROR values "reject"
// and "local".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "reject":
		return PolicyReject, nil
	case "local":
		return PolicyLocal, nil
	}
	return PolicyReject, fmt.Errorf("ratelimit: unknown policy %q (want reject or local)", s)
}

func (p Policy) String() string {
	if p == PolicyLocal {
		return "local"
	}
	return "reject"
}

// Config sets a Limiter's or a Semaphore's bounds and surroundings. Zero
// values take defaults: 10 permits, a 200 ms poll, and a 15 s wait on a 30 s
// lease for a Limiter (DESIGN §7), a 5 s wait on a 300 s lease for a
// Semaphore (uploads); a zero MaxQueue or MaxQueuedPerUser means no cap.
// A disabled limiter is not built: the caller holds none.
type Config struct {
	MaxConcurrent    int
	MaxWait          time.Duration
	Lease            time.Duration
	PollInterval     time.Duration
	MaxQueue         int // Limiter only
	MaxQueuedPerUser int // Limiter only
	// MaxRunningPerUser is the running cap (Limiter only, 0 = none): a
	// user holding that many permits is passed over while another user
	// below it waits (lua/lib.lua); alone, a user still gets every permit.
	MaxRunningPerUser int
	OnRedisError      Policy // Limiter only: a Semaphore always refuses

	// Budget, when set, makes every grant also spend a model endpoint's
	// requests and tokens per window (budget.go, Limiter only).
	Budget Budget

	// NoPubSub turns off the notification subscription, so waiters only
	// poll. Releases still publish, for instances that do subscribe.
	NoPubSub bool
	// Registerer exports the metrics; limiters with the same name on the
	// same registerer share one set of series. Nil keeps them unexported.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil discards
	// Now measures wait times and the pause after a Redis failure (nil is
	// time.Now). Leases never use it: they run on Redis TIME.
	Now func() time.Time
}

const (
	defaultMaxConcurrent = 10
	defaultMaxWait       = 15 * time.Second
	defaultLease         = 30 * time.Second
	defaultPollInterval  = 200 * time.Millisecond

	// markerGrace is how long a queue entry outlives its waiter's deadline,
	// so a live waiter is never mistaken for a zombie near its deadline.
	markerGrace = 5 * time.Second
	// redisRetryAfter is how long Acquire applies the Redis-error policy
	// without asking Redis again after a failure.
	redisRetryAfter = time.Second
	// headWindow is how many queue members one claim inspects ahead of the
	// caller. It bounds a script's work; a longer run of zombies is cleared
	// over several claims.
	headWindow = 128
	// maxPollSkip bounds how many poll ticks a waiter far back in the queue
	// lets pass between claims (2 s at the default 200 ms poll).
	maxPollSkip = 10
)

// withDefaults fills zero fields; maxWait and lease are the defaults of the
// Limiter or the Semaphore.
func (c Config) withDefaults(maxWait, lease time.Duration) Config {
	c.MaxConcurrent = cmp.Or(max(c.MaxConcurrent, 0), defaultMaxConcurrent)
	c.MaxWait = cmp.Or(max(c.MaxWait, 0), maxWait)
	c.Lease = cmp.Or(max(c.Lease, 0), lease)
	c.PollInterval = cmp.Or(max(c.PollInterval, 0), defaultPollInterval)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// setup registers the metrics of the limiter or semaphore named name and
// builds its notifier.
func (c Config) setup(rdb redis.UniversalClient, k keys, name string) (*metrics, *notifier) {
	m, err := registerMetrics(c.Registerer, name)
	if err != nil {
		c.Logger.Error("ratelimit: metrics not registered", "limiter", name, "err", err)
	}
	return m, newNotifier(rdb, k.notify, !c.NoPubSub, c.Logger)
}

// keys are one limiter's Redis keys. They share the hash tag {limiter:name}
// so every script's keys live in one Redis Cluster slot.
type keys struct {
	queue, seq, permits, entry, notify, users, levels, owners, held, deadlines string

	// instances are the live limiter instances (local.go).
	instances string
	// fence is the failover fence's hash (fence.go).
	fence string
}

func newKeys(prefix, name string) keys {
	if prefix == "" {
		prefix = "ragent:"
	}
	base := prefix + "{limiter:" + name + "}:"
	return keys{
		queue:     base + "queue",
		seq:       base + "seq",
		permits:   base + "permits",
		entry:     base + "entry:",
		notify:    base + "notify",
		users:     base + "users",
		levels:    base + "levels",
		owners:    base + "owners",
		held:      base + "held",
		deadlines: base + "deadlines",
		instances: base + "instances",
		fence:     base + "fence",
	}
}

// releaseKeys are release.lua's keys: the permit and its owner bookkeeping.
// A semaphore's release passes these alone (it has no queue, so every
// release publishes); a limiter's adds its queue (queueReleaseKeys).
func (k keys) releaseKeys() []string { return []string{k.permits, k.owners, k.held} }

// queueReleaseKeys are release.lua's keys for a limiter's permit: a release
// publishes only while someone is queued.
func (k keys) queueReleaseKeys() []string { return append(k.releaseKeys(), k.queue) }
