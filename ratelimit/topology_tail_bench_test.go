package ratelimit

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/internal/testenv"
)

// The diagnostics of docs/benchmarks/redis-topologies.md "Where the
// Cluster's p99 goes": what happens beside the slowest latency samples of
// BenchmarkGrantsPerTopology's design. Not figures of the target.

// procStart is close to the runtime's start, the origin of GODEBUG=gctrace's
// "@t" (BenchmarkTopologyTail logs the offset of a forced GC to calibrate).
var procStart = time.Now()

// diagEvent is a call a client made beside the samples: a dial, or any
// command that is not a script (HELLO, COMMAND, CLUSTER SLOTS...).
type diagEvent struct {
	kind       string
	start, end time.Time
}

type diagLog struct {
	mu  sync.Mutex
	evs []diagEvent
}

func (d *diagLog) add(kind string, s, e time.Time) {
	d.mu.Lock()
	d.evs = append(d.evs, diagEvent{kind, s, e})
	d.mu.Unlock()
}

type diagHook struct {
	d   *diagLog
	top string
}

func (h diagHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		s := time.Now()
		c, err := next(ctx, network, addr)
		h.d.add(h.top+":dial", s, time.Now())
		return c, err
	}
}

func (h diagHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s := time.Now()
		err := next(ctx, cmd)
		name := cmd.Name()
		if name != "evalsha" && name != "eval" {
			a := cmd.Args()
			n := fmt.Sprint(a[0])
			if len(a) > 1 {
				n += " " + fmt.Sprint(a[1])
			}
			h.d.add(h.top+":cmd:"+n, s, time.Now())
		}
		return err
	}
}

func (h diagHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s := time.Now()
		err := next(ctx, cmds)
		h.d.add(h.top+":pipeline", s, time.Now())
		return err
	}
}

func hookAll(b *testing.B, c redis.UniversalClient, h diagHook) {
	switch cc := c.(type) {
	case *redis.ClusterClient:
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		_ = cc.ForEachShard(b.Context(), func(ctx context.Context, n *redis.Client) error { n.AddHook(h); return nil })
		cc.AddHook(diagHook{h.d, h.top + "/cc"})
	case *redis.Client:
		cc.AddHook(h)
	}
}

type diagSample struct {
	top        int
	start, end time.Time
	gc         bool
	i, round   int
}

// BenchmarkTopologyTail takes 1,000 grant samples per topology as
// BenchmarkGrantsPerTopology does (in turns, blocks of 50, the raw node's
// blocks beside them) with hooks on every limiter client, and logs for the
// samples at or above each topology's p99 the client calls that overlapped
// them and whether a GC cycle completed during them; the allocations per
// Acquire+Release per topology; and the first sample of a block against
// the rest. With DIAG_OUT=file it writes every sample and call (start and
// end, seconds since procStart) for a correlation with GODEBUG=gctrace=1.
func BenchmarkTopologyTail(b *testing.B) {
	tops := []redisconn.Topology{redisconn.Single, redisconn.Sentinel, redisconn.Cluster}
	d := &diagLog{}
	rs := make([]*topologyRun, len(tops))
	for i, top := range tops {
		rs[i] = newTopologyRun(b, top, string(top))
		for _, l := range rs[i].ls {
			hookAll(b, l.rdb, diagHook{d, string(top)})
		}
	}
	runtime.GC()
	b.Logf("forced GC at @%.4fs", time.Since(procStart).Seconds())
	t0 := time.Now()
	ctx := b.Context()
	gcm := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	gcs := func() uint64 { rtmetrics.Read(gcm); return gcm[0].Value.Uint64() }
	var samples []diagSample
	rounds := 20 * b.N
	const block = 50
	for round := range rounds {
		for j := range rs {
			ti := (j + round) % len(rs)
			r := rs[ti]
			for i := range block {
				id := fmt.Sprint("l", round, ".", i)
				g0 := gcs()
				start := time.Now()
				p, err := r.ls[0].Acquire(ctx, id, "u", nil)
				end := time.Now()
				g1 := gcs()
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, diagSample{ti, start, end, g1 != g0, i, round})
				p.Release()
			}
			for i := range block {
				if _, err := r.rawGrant(ctx, fmt.Sprint("r", round, ".", i)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Logf("samples over %v; %d events", time.Since(t0), len(d.evs))
	if out := os.Getenv("DIAG_OUT"); out != "" {
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range samples {
			fmt.Fprintf(f, "%s %.6f %.6f\n", tops[s.top], s.start.Sub(procStart).Seconds(), s.end.Sub(procStart).Seconds())
		}
		for _, e := range d.evs {
			fmt.Fprintf(f, "ev:%s %.6f %.6f\n", strings.ReplaceAll(e.kind, " ", "_"), e.start.Sub(procStart).Seconds(), e.end.Sub(procStart).Seconds())
		}
		f.Close()
	}
	kinds := map[string]int{}
	for _, e := range d.evs {
		if e.start.After(t0) {
			kinds[e.kind]++
		}
	}
	b.Logf("events during samples phase: %v", kinds)
	for _, e := range d.evs {
		if e.start.After(t0) {
			b.Logf("  event %s at +%v took %v", e.kind, e.start.Sub(t0).Round(time.Millisecond), e.end.Sub(e.start).Round(time.Microsecond))
		}
	}
	for ti, top := range tops {
		r := rs[ti]
		n := 0
		a := testing.AllocsPerRun(200, func() {
			n++
			p, err := r.ls[0].Acquire(ctx, fmt.Sprint("a", n), "u", nil)
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		})
		b.Logf("%s: %.0f allocs per Acquire+Release", top, a)
	}
	// first-of-block vs rest
	for ti, top := range tops {
		var first, rest []time.Duration
		for _, s := range samples {
			if s.top != ti {
				continue
			}
			if s.i == 0 {
				first = append(first, s.end.Sub(s.start))
			} else {
				rest = append(rest, s.end.Sub(s.start))
			}
		}
		b.Logf("%s: first of block p50 %.3f (n=%d); rest p50 %.3f p99 %.3f", top, ms(percentile(first, 50)), len(first), ms(percentile(rest, 50)), ms(percentile(rest, 99)))
	}
	for ti, top := range tops {
		var lat []time.Duration
		for _, s := range samples {
			if s.top == ti {
				lat = append(lat, s.end.Sub(s.start))
			}
		}
		p99 := percentile(lat, 99)
		var worst []diagSample
		for _, s := range samples {
			if s.top == ti && s.end.Sub(s.start) >= p99 {
				worst = append(worst, s)
			}
		}
		slices.SortFunc(worst, func(a, b diagSample) int { return int(b.end.Sub(b.start) - a.end.Sub(a.start)) })
		ngc, nev := 0, 0
		var lines []string
		for _, s := range worst {
			var ov []string
			for _, e := range d.evs {
				if e.start.Before(s.end) && e.end.After(s.start) {
					ov = append(ov, e.kind)
				}
			}
			if s.gc {
				ngc++
			}
			if len(ov) > 0 {
				nev++
			}
			lines = append(lines, fmt.Sprintf("%.3f ms at +%v round %d #%d gc=%v ev=%v", ms(s.end.Sub(s.start)), s.start.Sub(t0).Round(time.Millisecond), s.round, s.i, s.gc, ov))
		}
		allgc := 0
		for _, s := range samples {
			if s.top == ti && s.gc {
				allgc++
			}
		}
		b.Logf("%s: p50 %.3f p99 %.3f p99.9 %.3f; %d samples >= p99: %d with GC, %d with an event; GC in %d of all %d samples",
			top, ms(percentile(lat, 50)), ms(p99), ms(p999(lat)), len(worst), ngc, nev, allgc, len(lat))
		for _, l := range lines {
			b.Log("   ", l)
		}
	}
}

func p999(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*999/1000]
}

// BenchmarkTopologyGap times a grant after an idle gap (DIAG_GAP, 20 ms
// unless set) against the grants right after it, per topology, in turns.
func BenchmarkTopologyGap(b *testing.B) {
	tops := []redisconn.Topology{redisconn.Single, redisconn.Sentinel, redisconn.Cluster}
	rs := make([]*topologyRun, len(tops))
	for i, top := range tops {
		rs[i] = newTopologyRun(b, top, string(top))
	}
	ctx := b.Context()
	gap := 20 * time.Millisecond
	if g := os.Getenv("DIAG_GAP"); g != "" {
		gap, _ = time.ParseDuration(g)
	}
	after := make([][]time.Duration, len(rs))
	next := make([][]time.Duration, len(rs))
	warmUp(b, rs)
	for round := range 100 * b.N {
		for j := range rs {
			ti := (j + round) % len(rs)
			time.Sleep(gap)
			for i := range 5 {
				start := time.Now()
				p, err := rs[ti].ls[0].Acquire(ctx, fmt.Sprint("g", round, ".", i), "u", nil)
				d := time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
				if i == 0 {
					after[ti] = append(after[ti], d)
				} else {
					next[ti] = append(next[ti], d)
				}
			}
		}
	}
	for ti, top := range tops {
		b.Logf("%-8s after a %v gap: p50 %.3f p90 %.3f (n=%d); back to back: p50 %.3f p90 %.3f p99 %.3f (n=%d)", top, gap,
			ms(percentile(after[ti], 50)), ms(percentile(after[ti], 90)), len(after[ti]),
			ms(percentile(next[ti], 50)), ms(percentile(next[ti], 90)), ms(percentile(next[ti], 99)), len(next[ti]))
	}
}

// BenchmarkClusterClientTail runs the limiter on the Cluster's slot master
// through go-redis ClusterClients (redisconn.New) and through plain clients
// to the same master (cluster-plain; the limiter's keys share one hash tag,
// so one master serves them), beside the single node and a second single
// node run (the A/A control), 5,000 samples each in turns, warmed first.
func BenchmarkClusterClientTail(b *testing.B) {
	single := newTopologyRun(b, redisconn.Single, "single")
	singleB := newTopologyRun(b, redisconn.Single, "single-b")
	cluster := newTopologyRun(b, redisconn.Cluster, "cluster")
	opts := testenv.RedisOptionsOf(b, redisconn.Cluster)
	u, err := redis.ParseURL(opts.URL)
	if err != nil {
		b.Fatal(err)
	}
	u.Addr = cluster.raw.Options().Addr
	prefix := testenv.Prefix(b)
	cfg := Config{MaxConcurrent: 50, MaxWait: 30 * time.Second, Lease: 10 * time.Second}
	pc := func() redis.UniversalClient { c := redis.NewClient(u); b.Cleanup(func() { c.Close() }); return c }
	first := pc()
	cleanupKeys(b, first, prefix)
	plain := &topologyRun{name: "cluster-plain", ls: []*Limiter{startLimiter(b, first, prefix, "chat", cfg), startLimiter(b, pc(), prefix, "chat", cfg)}}
	rs := []*topologyRun{single, singleB, cluster, plain}
	warmUp(b, rs)
	// The Go scheduler's latencies (runnable to running) during each
	// run's blocks, summed per run.
	sched := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	read := func() *rtmetrics.Float64Histogram {
		rtmetrics.Read(sched)
		h := sched[0].Value.Float64Histogram()
		return &rtmetrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: h.Buckets}
	}
	schedCounts := make([][]uint64, len(rs))
	for round := range 100 * b.N {
		for j := range rs {
			k := (j + round) % len(rs)
			r := rs[k]
			h0 := read()
			r.sample(b, round)
			h1 := read()
			if schedCounts[k] == nil {
				schedCounts[k] = make([]uint64, len(h1.Counts))
			}
			for x := range h1.Counts {
				schedCounts[k][x] += h1.Counts[x] - h0.Counts[x]
			}
		}
	}
	buckets := read().Buckets
	for k, r := range rs {
		var n, over100, over500 uint64
		for x, c := range schedCounts[k] {
			n += c
			if buckets[x] >= 100e-6 {
				over100 += c
			}
			if buckets[x] >= 500e-6 {
				over500 += c
			}
		}
		b.Logf("%-13s Go scheduling latencies during its blocks: %d, >= 100 µs %d, >= 500 µs %d", r.name, n, over100, over500)
	}
	for _, r := range rs {
		b.Logf("%-13s p50 %.3f p99 %.3f p99.9 %.3f ms (n=%d); /single p50 %.2f p99 %.2f", r.name, ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), ms(p999(r.lat)), len(r.lat),
			ms(percentile(r.lat, 50))/ms(percentile(single.lat, 50)), ms(percentile(r.lat, 99))/ms(percentile(single.lat, 99)))
	}
}

// BenchmarkOwnNodesTail runs the limiter, in turns and warmed, 5,000
// samples each, on the shared single node and Cluster (scripts/services.sh)
// and on redis-server processes of its own with nothing else on them: a
// standalone node (plain client) and a cluster master holding every slot
// with a replica (a ClusterClient from redisconn.New), to tell the shared
// cluster's surroundings from a cluster master itself.
func BenchmarkOwnNodesTail(b *testing.B) {
	cfg := Config{MaxConcurrent: 50, MaxWait: 30 * time.Second, Lease: 10 * time.Second}
	own := func(name string, c func() redis.UniversalClient) *topologyRun {
		first := c()
		prefix := testenv.Prefix(b)
		return &topologyRun{name: name, ls: []*Limiter{startLimiter(b, first, prefix, "chat", cfg), startLimiter(b, c(), prefix, "chat", cfg)}}
	}
	standalone := testenv.StartRedisServer(b)
	master, _ := startLoneCluster(b, true)
	rs := []*topologyRun{
		newTopologyRun(b, redisconn.Single, "single"),
		newTopologyRun(b, redisconn.Cluster, "cluster"),
		own("own-standalone", func() redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: standalone.Addr})
			b.Cleanup(func() { c.Close() })
			return c
		}),
		own("own-cluster+replica", func() redis.UniversalClient {
			c, err := redisconn.New(redisconn.Options{URL: "redis://" + master.Addr, ClusterAddrs: []string{master.Addr}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return c
		}),
	}
	warmUp(b, rs)
	for round := range 100 * b.N {
		for j := range rs {
			r := rs[(j+round)%len(rs)]
			r.sample(b, round)
		}
	}
	for _, r := range rs {
		b.Logf("%-19s p50 %.3f p99 %.3f ms (n=%d); /single p50 %.2f p99 %.2f; /own-standalone p99 %.2f", r.name,
			ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), len(r.lat),
			ms(percentile(r.lat, 50))/ms(percentile(rs[0].lat, 50)), ms(percentile(r.lat, 99))/ms(percentile(rs[0].lat, 99)),
			ms(percentile(r.lat, 99))/ms(percentile(rs[2].lat, 99)))
	}
}

// BenchmarkClusterClientRate takes BenchmarkGrantsPerTopology's grants/s
// (100 acquirers on two limiters, rounds of 500 in turns, 6,000 grants
// each) on the single node, on the Cluster through the ClusterClient of
// redisconn.New, and on the same Cluster master through a plain client
// (every key of the limiter is in that master's slot): what the Cluster
// client itself costs a CPU-bound burst on this machine.
func BenchmarkClusterClientRate(b *testing.B) {
	cluster := newTopologyRun(b, redisconn.Cluster, "cluster")
	master := slotNode(b, cluster.ls[0].rdb, testenv.RedisOptionsOf(b, redisconn.Cluster), cluster.rawKeys.permits)
	plain := newRun(b, redisconn.Cluster, "cluster-plain", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: master}) },
		func(redis.UniversalClient, string) *redis.Options { return &redis.Options{Addr: master} })
	rs := []*topologyRun{newTopologyRun(b, redisconn.Single, "single"), cluster, plain}
	warmUp(b, rs)
	for round := range 12 * b.N {
		for j := range rs {
			r := rs[(j+round)%len(rs)]
			r.busy += grantBurst(b, r.ls, fmt.Sprint("g", round, "."), 500)
			r.grants += 500
		}
	}
	rate := func(r *topologyRun) float64 { return float64(r.grants) / r.busy.Seconds() }
	for _, r := range rs {
		b.Logf("%-13s %5.0f grants/s, single ÷ this %.2f", r.name, rate(r), rate(rs[0])/rate(r))
		b.ReportMetric(rate(rs[0])/rate(r), r.name+"-single/rate")
	}
	b.ReportMetric(rate(plain)/rate(cluster), "plain/clusterclient")
}
