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
	_, prefix := cleanRedis(b)
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
		granted := acquireQueued(b.Context(), ls[(i+1)%2], fmt.Sprint("h", i), "u")
		// Releasing right after the waiter queued would always cost the
		// poller a full interval; a random phase gives the average case.
		time.Sleep(phase)
		start := time.Now()
		held[ls[0].name].Release()
		r := <-granted
		d := time.Since(start)
		if r.err != nil {
			b.Error(r.err)
		}
		held[ls[0].name] = r.p
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
	_, prefix := cleanRedis(b)
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
	rdb, prefix := cleanRedis(b)
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

// BenchmarkFairShare is the per-user fairness scenario: N = 10 on two
// instances, a heavy user keeps 20 streams open (each holds a permit for
// 10–30 ms, random, and asks again at once, so about ten of its requests
// wait at any moment), and a light user asks b.N times, one request at a
// time. For each light request it records the wait (Acquire called →
// granted) and how many of the heavy user's requests that were already
// waiting when it arrived were granted before it (0 when the light user goes
// first; about ten when it queues behind the heavy user's backlog). After
// each light request the heavy user takes the freed slot back before the
// next light request arrives.
func BenchmarkFairShare(b *testing.B) {
	const (
		n            = 10
		heavyStreams = 20
	)
	type span struct{ asked, granted time.Time }
	_, prefix := cleanRedis(b)
	cfg := Config{MaxConcurrent: n, MaxWait: 30 * time.Second, Lease: 10 * time.Second}
	ls := []*Limiter{
		startLimiter(b, testenv.Redis(b), prefix, "chat", cfg),
		startLimiter(b, testenv.Redis(b), prefix, "chat", cfg),
	}
	ctx, cancel := context.WithCancel(b.Context())
	var (
		wg          sync.WaitGroup
		heavyGrants atomic.Int64
		mu          sync.Mutex
		heavy       []span
	)
	for s := range heavyStreams {
		wg.Go(func() {
			for i := 0; ; i++ {
				asked := time.Now()
				p, err := ls[s%2].Acquire(ctx, fmt.Sprintf("heavy-%d-%d", s, i), "heavy", nil)
				if err != nil {
					return // the benchmark is over
				}
				granted := time.Now()
				heavyGrants.Add(1)
				mu.Lock()
				heavy = append(heavy, span{asked, granted})
				mu.Unlock()
				select {
				case <-time.After(10*time.Millisecond + rand.N(20*time.Millisecond)):
				case <-ctx.Done():
				}
				p.Release()
			}
		})
	}
	// Start measuring once the heavy user's backlog is queued.
	for {
		st, err := ls[0].Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.QueueLength >= heavyStreams-n-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	light := make([]span, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		asked := time.Now()
		p, err := ls[i%2].Acquire(ctx, fmt.Sprint("light-", i), "light", nil)
		if err != nil {
			b.Fatal(err)
		}
		light = append(light, span{asked, time.Now()})
		p.Release()
		// Let the heavy user take the freed slot back, so each light
		// request arrives at a full house, as in the scenario.
		for g := heavyGrants.Load(); heavyGrants.Load() < g+2; {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	waits := make([]time.Duration, len(light))
	ahead := make([]time.Duration, len(light)) // counts, kept as durations for percentile
	for i, l := range light {
		waits[i] = l.granted.Sub(l.asked)
		for _, h := range heavy {
			if h.asked.Before(l.asked) && h.granted.After(l.asked) && h.granted.Before(l.granted) {
				ahead[i]++
			}
		}
	}
	b.ReportMetric(ms(percentile(waits, 50)), "light-wait-p50-ms")
	b.ReportMetric(ms(percentile(waits, 99)), "light-wait-p99-ms")
	b.ReportMetric(float64(percentile(ahead, 50)), "heavy-granted-first-p50")
	b.ReportMetric(float64(percentile(ahead, 99)), "heavy-granted-first-p99")
}
