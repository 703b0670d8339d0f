package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

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
	prefix := testenv.Prefix(b)
	cleanupKeys(b, testenv.Redis(b), prefix)
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
