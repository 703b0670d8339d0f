package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// BenchmarkHandoff measures release → next waiter granted, between two
// instances, with Pub/Sub and with polling only (default 200 ms poll), in
// the same run. Each iteration does one handoff of each kind; the pubsub
// slowest samples are logged (-v) because on a shared machine the tail is
// scheduling noise worth seeing.
func BenchmarkHandoff(b *testing.B) {
	prefix := testenv.Prefix(b)
	cleanupKeys(b, testenv.Redis(b), prefix)
	cfg := Config{MaxConcurrent: 1, MaxWait: 10 * time.Second, Lease: 10 * time.Second}
	pair := func(name string, noPubSub bool) [2]*Limiter {
		cfg := cfg
		cfg.NoPubSub = noPubSub
		return [2]*Limiter{
			startLimiter(b, testenv.Redis(b), prefix, name, cfg),
			startLimiter(b, testenv.Redis(b), prefix, name, cfg),
		}
	}
	pubsub, polling := pair("pubsub", false), pair("polling", true)
	var fast, slow []time.Duration
	held := map[string]*Permit{}
	for _, ls := range [][2]*Limiter{pubsub, polling} {
		p, err := ls[0].Acquire(b.Context(), "first", "u", nil)
		if err != nil {
			b.Fatal(err)
		}
		held[ls[0].name] = p
	}
	handoff := func(i int, ls [2]*Limiter, phase time.Duration) time.Duration {
		queued := make(chan struct{})
		granted := make(chan *Permit)
		var once sync.Once
		go func() {
			p, err := ls[(i+1)%2].Acquire(b.Context(), fmt.Sprint("h", i), "u",
				func(int, int) { once.Do(func() { close(queued) }) })
			once.Do(func() { close(queued) })
			if err != nil {
				b.Error(err)
			}
			granted <- p
		}()
		<-queued
		// Releasing right after the waiter queued would always cost the
		// poller a full interval; a random phase gives the average case.
		time.Sleep(phase)
		start := time.Now()
		held[ls[0].name].Release()
		p := <-granted
		d := time.Since(start)
		held[ls[0].name] = p
		return d
	}
	b.ResetTimer()
	for i := range b.N {
		fast = append(fast, handoff(i, pubsub, 0))
		slow = append(slow, handoff(i, polling, rand.N(defaultPollInterval)))
	}
	b.StopTimer()
	for _, p := range held {
		p.Release()
	}
	slices.Sort(fast)
	b.Logf("pubsub slowest: %v", fast[max(0, len(fast)-8):])
	fp50, fp99 := percentile(fast, 50), percentile(fast, 99)
	sp50, sp99 := percentile(slow, 50), percentile(slow, 99)
	b.ReportMetric(ms(fp50), "pubsub-p50-ms")
	b.ReportMetric(ms(fp99), "pubsub-p99-ms")
	b.ReportMetric(ms(sp50), "polling-p50-ms")
	b.ReportMetric(ms(sp99), "polling-p99-ms")
	b.ReportMetric(float64(sp50)/float64(fp99), "polling-p50/pubsub-p99")
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkGrants measures grant throughput with N=50 and zero work: 100
// acquirers on two instances acquire and release as fast as they can.
func BenchmarkGrants(b *testing.B) {
	const workers = 100
	prefix := testenv.Prefix(b)
	cleanupKeys(b, testenv.Redis(b), prefix)
	cfg := Config{MaxConcurrent: 50, MaxWait: 30 * time.Second, Lease: 10 * time.Second}
	ls := []*Limiter{
		startLimiter(b, testenv.Redis(b), prefix, "chat", cfg),
		startLimiter(b, testenv.Redis(b), prefix, "chat", cfg),
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				p, err := ls[w%2].Acquire(b.Context(), fmt.Sprint("g", i), fmt.Sprint("u", w), nil)
				if err != nil {
					b.Error(err)
					return
				}
				p.Release()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "grants/s")
}

// countingHook counts Redis round trips (a pipeline counts once).
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkUncontendedRoundTrips counts Redis round trips per uncontended
// Acquire and per Release.
func BenchmarkUncontendedRoundTrips(b *testing.B) {
	prefix := testenv.Prefix(b)
	rdb := testenv.Redis(b)
	cleanupKeys(b, rdb, prefix)
	hook := &countingHook{}
	rdb.AddHook(hook)
	l := startLimiter(b, rdb, prefix, "chat", Config{MaxConcurrent: 10, Lease: 10 * time.Second})
	warm, err := l.Acquire(b.Context(), "warm", "u", nil) // loads the scripts
	if err != nil {
		b.Fatal(err)
	}
	warm.Release()
	var acquireRT, releaseRT int64
	b.ResetTimer()
	for i := range b.N {
		n0 := hook.n.Load()
		p, err := l.Acquire(b.Context(), fmt.Sprint("u", i), "u", nil)
		if err != nil {
			b.Fatal(err)
		}
		n1 := hook.n.Load()
		p.Release()
		acquireRT += n1 - n0
		releaseRT += hook.n.Load() - n1
	}
	b.ReportMetric(float64(acquireRT)/float64(b.N), "round-trips/grant")
	b.ReportMetric(float64(releaseRT)/float64(b.N), "round-trips/release")
}
