package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"net"
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
//
// The topologies take turns: the latency samples are taken in blocks of
// 50 and the grants in rounds of 500, topology after topology in a
// rotating order, so a change in the machine's load during the run falls
// on all of them alike (one topology after the other, the ratios swung by
// 2x between runs of the same code on the shared VM).
//
// Beside each limiter block runs a block of the same enqueue and release
// scripts sent by a plain go-redis client straight to the node that holds
// the limiter's slot (the single node, the Sentinel primary, the slot's
// Cluster master): the raw cost of that node, with no ragent Go code and no
// topology client. raw-p50/single is the topology's own share of the p50
// ratio; p50/raw is what the limiter adds on top of its node.
//
// With the fence, each topology gets 5,000 latency samples (100 rounds),
// and a second single node run (single-b: limiters and clients of its own
// on the same node) takes its turns beside them: an A/A control, whose
// ratios to single are the estimate's own noise in the same run. The p99
// is reported over the 5,000 samples and, as p99/single-chunk-min/max,
// the range of the ratio over the five chunks of 1,000 consecutive samples
// (20 rounds, the size of one run of this benchmark before 2026-12-03
// 16:00). Every sample counts; the p99 is the one of percentile (the
// 4,950th of 5,000 in order). The first grant on each run's fresh clients
// is not a sample (measureTopologies) and is reported as first-ms.
//
// A third extra run, single+replica, is the like-for-like baseline: the
// limiter on a plain client to a standalone primary that streams to one
// replica (redis-server processes of the run's own). Sentinel's primary
// and each Cluster master replicate; the bare single node does not, and
// a replica on the same two cores makes its primary slower with no ragent
// code in the path (BenchmarkNodeCost). The */replicated ratios are what
// the topologies add beyond their replication: their clients, routing,
// Pub/Sub and the fence.
func BenchmarkGrantsPerTopology(b *testing.B) {
	tops := []redisconn.Topology{redisconn.Single, redisconn.Sentinel, redisconn.Cluster}
	for range b.N {
		runs := map[string]*topologyRun{}
		for _, fence := range []bool{true, false} {
			restore := func() {}
			if !fence {
				restore = withoutFence()
			}
			var rs []*topologyRun
			for _, top := range tops {
				rs = append(rs, newTopologyRun(b, top, string(top)))
			}
			rounds := latencyRounds
			if fence {
				// The A/A control: a second single node run, limiters and
				// clients of its own on the same node, measured in the same
				// turns: its ratio to single is the estimate's own noise.
				rs = append(rs, newTopologyRun(b, redisconn.Single, controlRun))
				// The like-for-like baseline: a single node that
				// replicates, as Sentinel's primary and a Cluster master do.
				rs = append(rs, newReplicatedRun(b, replicatedRun))
			} else {
				rounds = chunkRounds // the no-fence baseline: 1,000 samples
			}
			measureTopologies(b, rs, rounds)
			restore()
			for _, r := range rs {
				name := r.name
				if !fence {
					name += "-nofence"
				}
				runs[name] = r
			}
		}
		reportTopologies(b, tops, runs)
	}
}

// The two extra runs of BenchmarkGrantsPerTopology: the A/A control, and
// the single node with a replica.
const (
	controlRun    = "single-b"
	replicatedRun = "single+replica"
)

// The latency samples: rounds of one block of 50 per topology, 5,000
// samples per topology with the fence, reported whole and in 1,000-sample
// chunks of 20 consecutive rounds (the former benchmark's size), so the
// p99's spread within a run shows beside it.
const (
	latencyBlock  = 50
	latencyRounds = 100
	chunkRounds   = 20
)

// topologyRun is one topology's limiters, its raw node client and what
// was measured on them.
type topologyRun struct {
	top     redisconn.Topology
	name    string
	ls      []*Limiter
	raw     *redis.Client // straight to the node holding the limiter's slot
	rawKeys keys
	rawCfg  Config

	// enqueue and release are the scripts rawGrant sends: nil for the
	// limiter's own (BenchmarkNodeCost swaps in others).
	enqueue, release *redis.Script

	lat, rawLat []time.Duration
	first       time.Duration // the first Acquire, on cold clients
	grants      int
	busy        time.Duration
}

func newTopologyRun(b *testing.B, top redisconn.Topology, name string) *topologyRun {
	opts := testenv.RedisOptionsOf(b, top)
	raw, err := redis.ParseURL(opts.URL)
	if err != nil {
		b.Fatal(err)
	}
	return newRun(b, top, name, func() redis.UniversalClient {
		c, err := redisconn.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}, func(first redis.UniversalClient, key string) *redis.Options {
		raw.Addr = slotNode(b, first, opts, key)
		return raw
	})
}

// newReplicatedRun is a single node run on a standalone primary that
// streams to a replica, both redis-server processes of the run's own: the
// single node as Sentinel's primary and each Cluster master run it, with
// their replication, and without their topology client.
func newReplicatedRun(b *testing.B, name string) *topologyRun {
	primary, _ := testenv.StartPrimaryReplica(b)
	return newRun(b, redisconn.Single, name, func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: primary.Addr}) },
		func(redis.UniversalClient, string) *redis.Options { return &redis.Options{Addr: primary.Addr} })
}

// newRun builds a run of two limiters, each on a client of its own from
// client, and its raw client from the options rawNode gives for the node
// that holds the limiter's slot (asked of the first limiter's client).
func newRun(b *testing.B, top redisconn.Topology, name string, client func() redis.UniversalClient,
	rawNode func(first redis.UniversalClient, key string) *redis.Options) *topologyRun {
	newClient := func() redis.UniversalClient {
		c := client()
		b.Cleanup(func() { c.Close() })
		return c
	}
	prefix := testenv.Prefix(b)
	first := newClient()
	cleanupKeys(b, first, prefix)
	cfg := Config{MaxConcurrent: 50, MaxWait: 30 * time.Second, Lease: 10 * time.Second}
	r := &topologyRun{top: top, name: name,
		ls:     []*Limiter{startLimiter(b, first, prefix, "chat", cfg), startLimiter(b, newClient(), prefix, "chat", cfg)},
		rawCfg: cfg.withDefaults(defaultMaxWait, defaultLease)}
	rawPrefix := testenv.Prefix(b)
	r.rawKeys = newKeys(rawPrefix, "chat")
	r.raw = redis.NewClient(rawNode(first, r.rawKeys.permits))
	b.Cleanup(func() { r.raw.Close() })
	cleanupKeys(b, r.raw, rawPrefix)
	return r
}

// slotNode returns the address of the node that serves key on c's
// topology: the single node, the primary the Sentinels name, or the
// Cluster master of key's slot.
func slotNode(b *testing.B, c redis.UniversalClient, opts redisconn.Options, key string) string {
	ctx := b.Context()
	switch cc := c.(type) {
	case *redis.ClusterClient:
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		return node.Options().Addr
	case *redis.Client:
		if len(opts.SentinelAddrs) == 0 {
			return cc.Options().Addr
		}
		s := redis.NewSentinelClient(&redis.Options{Addr: opts.SentinelAddrs[0], Password: opts.SentinelPassword})
		defer s.Close()
		addr, err := s.GetMasterAddrByName(ctx, opts.SentinelMaster).Result()
		if err != nil {
			b.Fatal(err)
		}
		return net.JoinHostPort(addr[0], addr[1])
	}
	b.Fatalf("unexpected client %T", c)
	return ""
}

// rawGrant sends enqueue.lua (with the fence's key and arguments, as
// Limiter.enqueue does; seen is 0, so the first call sets the fence key
// instead of holding) and release.lua for request id straight to the
// node, and returns how long the enqueue took.
func (r *topologyRun) rawGrant(ctx context.Context, id string) (time.Duration, error) {
	k, cfg := r.rawKeys, r.rawCfg
	ks := []string{k.seq, k.queue, k.permits, k.users, k.owners, k.held, k.deadlines, k.entry, k.levels, k.fence}
	start := time.Now()
	v, err := cmp.Or(r.enqueue, enqueueScript).Run(ctx, r.raw, ks, id, "u", cfg.MaxConcurrent, cfg.Lease.Milliseconds(),
		(markerGrace + cfg.MaxWait).Milliseconds(), cfg.MaxQueue, cfg.MaxQueuedPerUser, headWindow, 0, 0,
		"0", renewEvery(cfg.Lease).Milliseconds()).Slice()
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if len(v) == 0 || v[0] != int64(statusGranted) {
		return d, fmt.Errorf("raw enqueue not granted: %v", v)
	}
	return d, cmp.Or(r.release, releaseScript).Run(ctx, r.raw, k.queueReleaseKeys(), id, k.notify).Err()
}

// measureTopologies takes the latency samples (rounds blocks of 50 per
// run) and the grants of every run, in turns.
//
// Before the samples each run's clients serve one grant (warmUp), and so
// does its raw client.
func measureTopologies(b *testing.B, rs []*topologyRun, rounds int) {
	ctx := b.Context()
	warmUp(b, rs)
	for _, r := range rs {
		if _, err := r.rawGrant(ctx, "w"); err != nil {
			b.Fatal(err)
		}
	}
	for round := range rounds {
		for j := range rs {
			r := rs[(j+round)%len(rs)]
			r.sample(b, round)
			for i := range latencyBlock {
				d, err := r.rawGrant(ctx, fmt.Sprint("r", round, ".", i))
				if err != nil {
					b.Fatal(err)
				}
				r.rawLat = append(r.rawLat, d)
			}
		}
	}
	const grantRounds, perRound = 6, 500 // 3,000 grants per topology
	for round := range grantRounds {
		for j := range rs {
			r := rs[(j+round)%len(rs)]
			r.busy += grantBurst(b, r.ls, fmt.Sprint("g", round, "."), perRound)
			r.grants += perRound
		}
	}
}

// warmUp makes one grant on each limiter of rs, so that no sample pays a
// fresh client's first call: it dials its node and sends HELLO, and a
// Cluster client also asks a node for COMMAND (the command table, to route
// by key) and dials the slot's master, one-time costs of a new process, not
// of a grant (1-14 ms on this machine). The first limiter's first grant is
// kept as r.first (reported as first-ms), not among the samples.
func warmUp(b *testing.B, rs []*topologyRun) {
	for _, r := range rs {
		for i, l := range r.ls {
			start := time.Now()
			p, err := l.Acquire(b.Context(), fmt.Sprint("w", i), "u", nil)
			if i == 0 {
				r.first = time.Since(start)
			}
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
	}
}

// sample times one block of latencyBlock sequential grants and releases on
// r's first limiter, into r.lat; round names the requests.
func (r *topologyRun) sample(b *testing.B, round int) {
	for i := range latencyBlock {
		start := time.Now()
		p, err := r.ls[0].Acquire(b.Context(), fmt.Sprint("l", round, ".", i), "u", nil)
		r.lat = append(r.lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// grantBurst has 100 acquirers on ls take and give back n permits, and
// returns how long that took.
func grantBurst(b *testing.B, ls []*Limiter, idPrefix string, n int64) time.Duration {
	const workers = 100
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				p, err := ls[w%len(ls)].Acquire(b.Context(), fmt.Sprint(idPrefix, i), fmt.Sprint("u", w), nil)
				if err != nil {
					b.Error(err)
					return
				}
				p.Release()
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func reportTopologies(b *testing.B, tops []redisconn.Topology, runs map[string]*topologyRun) {
	type result struct{ p50, p99, rate, rawP50, rawP99 float64 }
	res := func(r *topologyRun) result {
		return result{ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), float64(r.grants) / r.busy.Seconds(),
			ms(percentile(r.rawLat, 50)), ms(percentile(r.rawLat, 99))}
	}
	single := runs["single"]
	base := res(single)
	// chunkP99 is the ratio of r's p99 to the single node's in each chunk
	// of the same rounds (taken in the same turns).
	chunkP99 := func(r *topologyRun) (lo, hi float64, all []string) {
		n := chunkRounds * latencyBlock
		for k := 0; (k+1)*n <= len(r.lat); k++ {
			q := ms(percentile(r.lat[k*n:(k+1)*n], 99)) / ms(percentile(single.lat[k*n:(k+1)*n], 99))
			if k == 0 || q < lo {
				lo = q
			}
			if k == 0 || q > hi {
				hi = q
			}
			all = append(all, fmt.Sprintf("%.2f", q))
		}
		return lo, hi, all
	}
	repl := res(runs[replicatedRun])
	names := []string{controlRun, replicatedRun}
	for _, top := range tops {
		names = append(names, string(top))
	}
	for _, t := range names {
		r := res(runs[t])
		lo, hi, chunks := chunkP99(runs[t])
		b.Logf("%-8s fence: p50 %.3f ms p99 %.3f ms (%d samples) %.0f grants/s, raw node p50 %.3f ms p99 %.3f ms, "+
			"first grant %.3f ms; p99/single per 1,000 samples %s",
			t, r.p50, r.p99, len(runs[t].lat), r.rate, r.rawP50, r.rawP99, ms(runs[t].first), strings.Join(chunks, " "))
		b.ReportMetric(r.p50, t+"-p50-ms")
		b.ReportMetric(r.p99, t+"-p99-ms")
		b.ReportMetric(r.rate, t+"-grants/s")
		b.ReportMetric(r.rawP50, t+"-raw-p50-ms")
		b.ReportMetric(ms(runs[t].first), t+"-first-ms")
		b.ReportMetric(r.p50/base.p50, t+"-p50/single")
		b.ReportMetric(r.p99/base.p99, t+"-p99/single")
		b.ReportMetric(lo, t+"-p99/single-chunk-min")
		b.ReportMetric(hi, t+"-p99/single-chunk-max")
		b.ReportMetric(r.rate/base.rate, t+"-rate/single")
		b.ReportMetric(r.rawP50/base.rawP50, t+"-raw-p50/single")
		b.ReportMetric(r.rawP99/base.rawP99, t+"-raw-p99/single")
		b.ReportMetric(r.p50/r.rawP50, t+"-p50/raw")
		if t != controlRun && t != replicatedRun && t != string(redisconn.Single) {
			b.Logf("%-8s to single+replica: p50 %.2fx p99 %.2fx grants/s %.2fx, raw node p50 %.2fx",
				t, r.p50/repl.p50, r.p99/repl.p99, r.rate/repl.rate, r.rawP50/repl.rawP50)
			b.ReportMetric(r.p50/repl.p50, t+"-p50/replicated")
			b.ReportMetric(r.p99/repl.p99, t+"-p99/replicated")
			b.ReportMetric(r.rate/repl.rate, t+"-rate/replicated")
			b.ReportMetric(r.rawP50/repl.rawP50, t+"-raw-p50/replicated")
		}
		if nfr, ok := runs[t+"-nofence"]; ok {
			nf := res(nfr)
			b.Logf("%-8s no fence: p50 %.3f ms p99 %.3f ms (%d samples) %.0f grants/s, raw node p50 %.3f ms",
				t, nf.p50, nf.p99, len(nfr.lat), nf.rate, nf.rawP50)
			b.ReportMetric(r.p50/nf.p50, t+"-p50/nofence")
			b.ReportMetric(r.rate/nf.rate, t+"-rate/nofence")
		}
	}
}

// withoutFence swaps the grant scripts for builds whose fence never holds
// and never reads INFO (the baseline of the fence's cost) until restore.
func withoutFence() (restore func()) {
	saved := []*redis.Script{enqueueScript, claimScript, renewScript, tryScript}
	stub := map[string]string{"fence.lua": "local function fence_held(now_ms) return false end\n" +
		"local function fenced_reply(r, fenced) return r end\n"}
	enqueueScript = luaScript("", stub, "clock.lua", "budget.lua", "lib.lua", "fence.lua", "enqueue.lua")
	claimScript = luaScript("", stub, "clock.lua", "budget.lua", "lib.lua", "fence.lua", "claim.lua")
	renewScript = luaScript("", stub, "clock.lua", "fence.lua", "renew.lua")
	tryScript = luaScript("", stub, "clock.lua", "fence.lua", "try.lua")
	return func() {
		enqueueScript, claimScript, renewScript, tryScript = saved[0], saved[1], saved[2], saved[3]
	}
}

// luaScript builds a script as scripts.go does, from prelude and then
// files (lua/…), each replaced by its stub where stubs has one.
func luaScript(prelude string, stubs map[string]string, files ...string) *redis.Script {
	src := []byte(prelude)
	for _, f := range files {
		if stub, ok := stubs[f]; ok {
			src = append(src, stub...)
			continue
		}
		b, _ := luaFiles.ReadFile("lua/" + f)
		src = append(append(src, b...), '\n')
	}
	return redis.NewScript(string(src))
}

// BenchmarkNodeCost isolates what the node itself adds to the grant script,
// on redis-server processes of its own (same binary and flags as
// scripts/services.sh): a standalone node, a primary streaming to a
// replica, a cluster-enabled node holding every slot alone, and a cluster
// master with a replica. The same enqueue and release scripts go straight
// to each through a plain client, in turns (blocks of 50, rotating), and
// the enqueue's p50 is reported with its ratio to the standalone node.
//
// One more row, primary+replica:repl-none, sends the scripts to the same
// primary with redis.set_repl(redis.REPL_NONE) first, so that their writes
// are not sent to the replica: what the replication of a script's effects
// costs the primary. (ragent's scripts replicate: see
// docs/benchmarks/redis-topologies.md on why they keep doing so.)
func BenchmarkNodeCost(b *testing.B) {
	ctx := b.Context()
	standalone := testenv.StartRedisServer(b)
	primary, _ := testenv.StartPrimaryReplica(b)
	cluster := func(withReplica bool) string {
		m, _ := startLoneCluster(b, withReplica)
		return m.Addr
	}
	const unreplicated = "redis.set_repl(redis.REPL_NONE)\n"
	nodes := []struct {
		name, addr, prelude string
	}{
		{"standalone", standalone.Addr, ""},
		{"primary+replica", primary.Addr, ""},
		{"primary+replica:repl-none", primary.Addr, unreplicated},
		{"cluster-alone", cluster(false), ""},
		{"cluster+replica", cluster(true), ""},
	}
	cfg := Config{MaxConcurrent: 50, MaxWait: 30 * time.Second, Lease: 10 * time.Second}.withDefaults(defaultMaxWait, defaultLease)
	rs := make([]*topologyRun, len(nodes))
	for i, n := range nodes {
		rs[i] = &topologyRun{raw: redis.NewClient(&redis.Options{Addr: n.addr}), rawKeys: newKeys(fmt.Sprint("bench", i, ":"), "chat"), rawCfg: cfg}
		if n.prelude != "" {
			rs[i].enqueue = luaScript(n.prelude, nil, "clock.lua", "budget.lua", "lib.lua", "fence.lua", "enqueue.lua")
			rs[i].release = luaScript(n.prelude, nil, "clock.lua", "lib.lua", "release.lua")
		}
		b.Cleanup(func() { rs[i].raw.Close() })
	}
	for range b.N {
		const rounds, block = 40, 50
		for round := range rounds {
			for j := range rs {
				r := rs[(j+round)%len(rs)]
				for i := range block {
					d, err := r.rawGrant(ctx, fmt.Sprint(round, ".", i))
					if err != nil {
						b.Fatal(err)
					}
					r.rawLat = append(r.rawLat, d)
				}
			}
		}
	}
	base := ms(percentile(rs[0].rawLat, 50))
	for i, n := range nodes {
		p50, p99 := ms(percentile(rs[i].rawLat, 50)), ms(percentile(rs[i].rawLat, 99))
		b.Logf("%-25s enqueue p50 %.3f ms p99 %.3f ms, p50 %.2fx the standalone node", n.name, p50, p99, p50/base)
		b.ReportMetric(p50, n.name+"-p50-ms")
		b.ReportMetric(p50/base, n.name+"-p50/standalone")
	}
}
