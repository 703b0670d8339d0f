package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// testLogger writes through t.Output, so logs show only for failing tests
// (or with -v). Background goroutines (a best-effort leave after a Redis
// error) may log after the test ends; those lines are dropped.
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{out: t.Output()}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu   sync.Mutex
	done bool
	out  io.Writer
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(b), nil
	}
	return w.out.Write(b)
}

// startLimiter builds a limiter (logging to the test unless cfg says
// otherwise), runs its subscription until the test ends and waits until the
// subscription is confirmed, so tests do not race the first notification.
func startLimiter(t testing.TB, rdb redis.UniversalClient, prefix, name string, cfg Config) *Limiter {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	l := New(rdb, prefix, name, cfg)
	testenv.Run(t, l.Run)
	if l.n.enabled {
		waitReady(t, l.n)
	}
	return l
}

// cleanLimiter starts limiter name on a key prefix of the test's own (see
// cleanRedis) and returns it with the test's client.
func cleanLimiter(t testing.TB, name string, cfg Config) (*Limiter, redis.UniversalClient) {
	t.Helper()
	rdb, prefix := cleanRedis(t)
	return startLimiter(t, rdb, prefix, name, cfg), rdb
}

func waitReady(t testing.TB, n *notifier) {
	t.Helper()
	select {
	case <-n.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("subscription not confirmed within 5s")
	}
}

// cleanupKeys deletes every key under prefix when the test ends.
func cleanupKeys(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := testenv.Keys(ctx, rdb, prefix+"*")
		for _, k := range keys {
			rdb.Del(ctx, k)
		}
	})
}

// cleanRedis returns the test's Redis client and a key prefix of its own,
// whose keys are deleted when the test ends.
func cleanRedis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	cleanupKeys(t, rdb, prefix)
	return rdb, prefix
}

// assertDrained checks that no permit, queue entry, marker or user count is
// left behind under k.
func assertDrained(t testing.TB, rdb redis.UniversalClient, k keys) {
	t.Helper()
	ctx := context.Background()
	for _, key := range []string{k.permits, k.queue, k.deadlines} {
		if n := rdb.ZCard(ctx, key).Val(); n != 0 {
			t.Errorf("%s: %d members left: %v", key, n, rdb.ZRangeWithScores(ctx, key, 0, -1).Val())
		}
	}
	for _, key := range []string{k.users, k.levels, k.owners, k.held} {
		if m := rdb.HGetAll(ctx, key).Val(); len(m) != 0 {
			t.Errorf("%s: left %v", key, m)
		}
	}
	if markers, _ := testenv.Keys(ctx, rdb, k.entry+"*"); len(markers) != 0 {
		t.Errorf("entry markers left: %v", markers)
	}
}

// switchableClient is a client on the test Redis whose connections can be
// cut (as if Redis went away) and restored, like a Redis restart seen from
// one instance.
type switchableClient struct {
	*redis.Client
	name  string
	down  atomic.Bool
	admin redis.UniversalClient
}

func newSwitchableClient(t testing.TB) *switchableClient {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := &switchableClient{name: "ratelimit-test-" + testenv.RandomSuffix(), admin: testenv.Redis(t)}
	opt.ClientName = c.name
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if c.down.Load() {
			return nil, errors.New("simulated outage")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	c.Client = redis.NewClient(opt)
	t.Cleanup(func() { c.Client.Close() })
	return c
}

// cut refuses new connections and kills the open ones.
func (c *switchableClient) cut(t testing.TB) {
	t.Helper()
	c.down.Store(true)
	killClients(t, c.admin, c.name)
}

func (c *switchableClient) restore() { c.down.Store(false) }

// cutAll cuts every client: Redis goes away for every instance.
func cutAll(t testing.TB, clients []*switchableClient) {
	t.Helper()
	for _, c := range clients {
		c.cut(t)
	}
}

// killClients kills the server side of every connection named name (and only
// those: other tests share this Redis).
func killClients(t testing.TB, admin redis.UniversalClient, name string) {
	t.Helper()
	ctx := context.Background()
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("client list: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(list))
	for sc.Scan() {
		var id, cname string
		for _, f := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "name="); ok {
				cname = v
			}
		}
		if cname == name {
			_ = admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err()
		}
	}
}

// metricValue reads a counter's, gauge's value or a histogram's sample count.
func metricValue(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("unsupported metric %v", &m)
	return 0
}

// acquired is the outcome of an Acquire run by acquireQueued.
type acquired struct {
	p   *Permit
	err error
}

// acquireQueued runs l.Acquire(ctx, id, user) in the background and returns
// once the request is queued (or Acquire returned without queueing), so the
// caller knows the queue's state; the outcome arrives on the channel.
func acquireQueued(ctx context.Context, l *Limiter, id, user string) <-chan acquired {
	queued := make(chan struct{})
	done := make(chan acquired, 1)
	var once sync.Once
	go func() {
		p, err := l.Acquire(ctx, id, user, func(int, int) { once.Do(func() { close(queued) }) })
		once.Do(func() { close(queued) })
		done <- acquired{p, err}
	}()
	<-queued
	return done
}

// queueOrder is l's queue, first in line first.
func queueOrder(t testing.TB, rdb redis.UniversalClient, l *Limiter) []string {
	t.Helper()
	got, err := rdb.ZRange(t.Context(), l.keys.queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// mustAcquire takes a permit of l for id and user, failing the test when
// Acquire does.
func mustAcquire(t testing.TB, l *Limiter, id, user string) *Permit {
	t.Helper()
	p, err := l.Acquire(t.Context(), id, user, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// allSeen reports whether every limiter's newcomer hold (awaitSeen) is over,
// so that its next acquire goes to Redis at once.
func allSeen(ls []*Limiter) bool {
	for _, l := range ls {
		if !l.local.joined.Load() || time.Now().UnixNano() < l.local.holdUntil.Load() {
			return false
		}
	}
	return true
}

// localPolicy is the configuration of the outage tests: n permits, the
// local semaphore when Redis fails, and no pub/sub (an instance hears of a
// freed permit by polling, every 50 ms), so cutting a client leaves
// nothing half-connected.
func localPolicy(n int, maxWait, lease time.Duration) Config {
	return Config{MaxConcurrent: n, MaxWait: maxWait, Lease: lease,
		PollInterval: 50 * time.Millisecond, OnRedisError: PolicyLocal, NoPubSub: true}
}

// localInstances starts k limiters of one name on a key prefix of the
// test's own (see cleanRedis), each on a client of its own that can be cut,
// and waits until each has seen the others: their shares add up to
// cfg.MaxConcurrent and no newcomer hold is left.
func localInstances(t testing.TB, k int, cfg Config) ([]*switchableClient, []*Limiter) {
	t.Helper()
	_, prefix := cleanRedis(t)
	var (
		clients  []*switchableClient
		limiters []*Limiter
	)
	for range k {
		c := newSwitchableClient(t)
		clients = append(clients, c)
		limiters = append(limiters, startLimiter(t, c, prefix, "chat", cfg))
	}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("each of %d instances to see the others", k), func() bool {
		var sum int64
		for _, l := range limiters {
			sum += l.local.share.Load()
		}
		return sum == int64(cfg.MaxConcurrent) && allSeen(limiters)
	})
	return clients, limiters
}

// holdShares takes each limiter's share of the permits from Redis (ids
// redis<i>-<j>, user u<i>), so that all MaxConcurrent are in flight, and
// fails the test on a local permit: Redis is up.
func holdShares(t testing.TB, limiters []*Limiter) []*Permit {
	t.Helper()
	var held []*Permit
	for i, l := range limiters {
		for j := range int(l.local.share.Load()) {
			p := mustAcquire(t, l, fmt.Sprintf("redis%d-%d", i, j), fmt.Sprint("u", i))
			if p.Local() {
				t.Fatalf("instance %d: a local permit with Redis up", i)
			}
			held = append(held, p)
		}
	}
	return held
}

// tryGrants makes k acquires on l for user (ids idPrefix0, idPrefix1, …),
// each granted or ending in ErrTimeout, and returns how many were granted.
// The permits are released when the test ends.
func tryGrants(t testing.TB, l *Limiter, k int, idPrefix, user string) int {
	t.Helper()
	granted := 0
	for j := range k {
		p, err := l.Acquire(t.Context(), fmt.Sprintf("%s%d", idPrefix, j), user, nil)
		switch {
		case errors.Is(err, ErrTimeout):
		case err != nil:
			t.Fatalf("acquire %s%d: %v", idPrefix, j, err)
		default:
			granted++
			t.Cleanup(p.Release)
		}
	}
	return granted
}
