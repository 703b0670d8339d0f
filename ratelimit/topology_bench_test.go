package ratelimit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/internal/testenv"
)

// BenchmarkGrantsPerTopology runs the limiter's grant path on the single
// node, on Sentinel and on Cluster in one run (the shared test topologies
// of scripts/services.sh), with the failover fence and without it (the
// grant scripts built with a fence that never holds), and reports for each:
// uncontended grant latency p50/p99 (one Acquire, one enqueue round trip)
// and grants/s of 100 acquirers on two instances (N = 50, zero work, as
// BenchmarkGrants), with ratios to the single node and to no fence.
func BenchmarkGrantsPerTopology(b *testing.B) {
	type result struct{ p50, p99, rate float64 }
	run := func(b *testing.B, top redisconn.Topology) result {
		opts := testenv.RedisOptionsOf(b, top)
		client := func() redis.UniversalClient {
			c, err := redisconn.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return c
		}
		prefix := testenv.Prefix(b)
		cleanupKeys(b, client(), prefix)
		cfg := Config{MaxConcurrent: 50, MaxWait: 30 * time.Second, Lease: 10 * time.Second}
		ls := []*Limiter{startLimiter(b, client(), prefix, "chat", cfg), startLimiter(b, client(), prefix, "chat", cfg)}
		// Latency: one acquirer, nothing else in flight.
		const samples = 1000
		lat := make([]time.Duration, 0, samples)
		for i := range samples {
			start := time.Now()
			p, err := ls[0].Acquire(b.Context(), fmt.Sprint("l", i), "u", nil)
			lat = append(lat, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
		// Throughput: 100 acquirers on two instances.
		const workers, grants = 100, 3000
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > grants {
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
		return result{ms(percentile(lat, 50)), ms(percentile(lat, 99)), grants / time.Since(start).Seconds()}
	}
	tops := []redisconn.Topology{redisconn.Single, redisconn.Sentinel, redisconn.Cluster}
	for range b.N {
		res := map[string]result{}
		for _, top := range tops {
			res[string(top)] = run(b, top)
		}
		restore := withoutFence()
		for _, top := range tops {
			res[string(top)+"-nofence"] = run(b, top)
		}
		restore()
		base := res["single"]
		for _, top := range tops {
			r, nf := res[string(top)], res[string(top)+"-nofence"]
			b.Logf("%-8s fence: p50 %.3f ms p99 %.3f ms %.0f grants/s | no fence: p50 %.3f ms p99 %.3f ms %.0f grants/s",
				top, r.p50, r.p99, r.rate, nf.p50, nf.p99, nf.rate)
			b.ReportMetric(r.p50, string(top)+"-p50-ms")
			b.ReportMetric(r.p99, string(top)+"-p99-ms")
			b.ReportMetric(r.rate, string(top)+"-grants/s")
			b.ReportMetric(r.p50/base.p50, string(top)+"-p50/single")
			b.ReportMetric(r.p99/base.p99, string(top)+"-p99/single")
			b.ReportMetric(r.rate/base.rate, string(top)+"-rate/single")
			b.ReportMetric(r.p50/nf.p50, string(top)+"-p50/nofence")
			b.ReportMetric(r.rate/nf.rate, string(top)+"-rate/nofence")
		}
	}
}

// withoutFence swaps the grant scripts for builds whose fence never holds
// and never reads INFO (the baseline of the fence's cost) until restore.
func withoutFence() (restore func()) {
	saved := []*redis.Script{enqueueScript, claimScript, renewScript, tryScript}
	build := func(files ...string) *redis.Script {
		var src strings.Builder
		for _, f := range files {
			if f == "fence.lua" {
				src.WriteString("local function fence_held(now_ms) return false end\n" +
					"local function fenced_reply(r, fenced) return r end\n")
				continue
			}
			b, _ := luaFiles.ReadFile("lua/" + f)
			src.Write(b)
			src.WriteByte('\n')
		}
		return redis.NewScript(src.String())
	}
	enqueueScript = build("clock.lua", "lib.lua", "fence.lua", "enqueue.lua")
	claimScript = build("clock.lua", "lib.lua", "fence.lua", "claim.lua")
	renewScript = build("clock.lua", "fence.lua", "renew.lua")
	tryScript = build("clock.lua", "fence.lua", "try.lua")
	return func() {
		enqueueScript, claimScript, renewScript, tryScript = saved[0], saved[1], saved[2], saved[3]
	}
}
