package ratelimit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestUncontendedWrites counts what one uncontended grant and one release
// make a primary send to its replica: the commands the replica applies
// (INFO commandstats on the replica, MULTI and EXEC included), on a
// primary with a replica and on a cluster master with a replica (where
// PUBLISH goes over the cluster bus, not the replication stream). Every
// write a grant script makes is replicated, and on a replica sharing the
// primary's cores each one costs the primary's reply time
// (docs/benchmarks/redis-topologies.md), so the hot path must write the
// minimum: the permit, its owner and its user's held count, and the
// arrival sequence for the request's place (lua/enqueue.lua's fast path);
// the release the same back, and no PUBLISH when nobody waits.
func TestUncontendedWrites(t *testing.T) {
	t.Parallel()
	const n = 50
	nodes := map[string]func(t *testing.T) (primary, replica *redis.Client){
		"primary+replica": startPrimaryReplica,
		"cluster+replica": startClusterReplica,
	}
	for _, budget := range []bool{false, true} {
		for _, name := range slices.Sorted(maps.Keys(nodes)) {
			t.Run(fmt.Sprintf("%s/budget=%v", name, budget), func(t *testing.T) {
				t.Parallel()
				primary, replica := nodes[name](t)
				cfg := Config{MaxConcurrent: 10, Lease: 30 * time.Second}
				// The grant, its release and the settlement's limits.
				grantMax, releaseMax := 6.0, 5.0
				if budget {
					cfg.Budget = Budget{Requests: 10 * n, Tokens: 1000 * n, Window: time.Minute}
					grantMax, releaseMax = 9, 7
				}
				l := startLimiter(t, primary, "w:", "chat", cfg)
				acquire := func(id string) *Permit {
					p, err := l.AcquireCost(t.Context(), id, "u", Class{}, Cost{Tokens: 100})
					if err != nil {
						t.Fatal(err)
					}
					return p
				}
				acquire("warm").ReleaseUsed(50) // the fence key, the budget's keys
				grants, releases := map[string]int{}, map[string]int{}
				for i := range n {
					s0 := replicated(t, primary, replica)
					p := acquire(fmt.Sprint("r", i))
					s1 := replicated(t, primary, replica)
					p.ReleaseUsed(50)
					s2 := replicated(t, primary, replica)
					addDelta(grants, s0, s1)
					addDelta(releases, s1, s2)
				}
				g, r := perCall(grants, n), perCall(releases, n)
				t.Logf("replicated per uncontended grant: %.2f commands %s", total(g), show(g))
				t.Logf("replicated per release: %.2f commands %s", total(r), show(r))
				if total(g) > grantMax {
					t.Errorf("an uncontended grant replicates %.2f commands, want at most %v", total(g), grantMax)
				}
				if total(r) > releaseMax {
					t.Errorf("a release replicates %.2f commands, want at most %v", total(r), releaseMax)
				}
				if budget {
					// Its expiry is set twice a window, not per grant
					// (budget.lua's budget_save), but it is set.
					k := l.keys.budget()
					for _, key := range []string{k, k + ":log", k + ":cost"} {
						if d := primary.PTTL(t.Context(), key).Val(); d <= 0 {
							t.Errorf("%s: PTTL %v, want an expiry", key, d)
						}
					}
				}
			})
		}
	}
}

// replicated waits until replica applied everything primary wrote so far
// and returns the replica's command counts.
func replicated(t *testing.T, primary, replica *redis.Client) map[string]int {
	t.Helper()
	ctx := context.Background()
	if err := primary.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the replica caught up", func() bool {
		return replOffset(ctx, primary, "master_repl_offset") == replOffset(ctx, replica, "slave_repl_offset")
	})
	info, err := replica.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		switch name {
		case "info", "ping", "replconf", "select", "command", "client", "cluster", "config":
			continue // the test's, the replication link's, the clients'
		}
		field, _, _ := strings.Cut(rest, ",")
		calls[name], _ = strconv.Atoi(strings.TrimPrefix(field, "calls="))
	}
	return calls
}

func replOffset(ctx context.Context, c *redis.Client, field string) string {
	for line := range strings.SplitSeq(c.Info(ctx, "replication").Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func addDelta(sum, before, after map[string]int) {
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			sum[k] += d
		}
	}
}

func perCall(sum map[string]int, n int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range sum {
		out[k] = float64(v) / float64(n)
	}
	return out
}

func total(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

func show(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// startPrimaryReplica starts a primary and its replica of the test's own.
func startPrimaryReplica(t *testing.T) (primary, replica *redis.Client) {
	p, r := testenv.StartPrimaryReplica(t)
	primary, replica = p.Client(), r.Client()
	t.Cleanup(func() { primary.Close(); replica.Close() })
	return primary, replica
}

// startClusterReplica starts a cluster master holding every slot and its
// replica, of the test's own.
func startClusterReplica(t *testing.T) (primary, replica *redis.Client) {
	m, r := startLoneCluster(t, true)
	primary, replica = m.Client(), r.Client()
	t.Cleanup(func() { primary.Close(); replica.Close() })
	return primary, replica
}

// startLoneCluster starts a cluster-enabled redis-server holding every
// slot alone and, withReplica, a replica of it in sync (nil without).
func startLoneCluster(tb testing.TB, withReplica bool) (master, replica *testenv.RedisProc) {
	ctx := tb.Context()
	master = testenv.StartRedisServer(tb, "--cluster-enabled", "yes")
	mc := master.Client()
	defer mc.Close()
	if err := mc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		tb.Fatal(err)
	}
	if withReplica {
		replica = testenv.StartRedisServer(tb, "--cluster-enabled", "yes")
		rc := replica.Client()
		defer rc.Close()
		host, port, _ := strings.Cut(master.Addr, ":")
		if err := rc.ClusterMeet(ctx, host, port).Err(); err != nil {
			tb.Fatal(err)
		}
		id := mc.Do(ctx, "CLUSTER", "MYID").Val()
		testenv.Eventually(tb, 20*time.Second, "the replica set", func() bool {
			return rc.Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
		})
		testenv.Eventually(tb, 20*time.Second, "the cluster replica in sync", func() bool {
			return strings.Contains(mc.Info(ctx, "replication").Val(), "state=online")
		})
	}
	testenv.Eventually(tb, 20*time.Second, "cluster_state:ok", func() bool {
		return strings.Contains(mc.ClusterInfo(ctx).Val(), "cluster_state:ok")
	})
	return master, replica
}

// TestReleaseWakesOnlyQueued: a release publishes its notification only
// while a request is queued (release.lua): with nobody waiting it would
// wake nobody, and a PUBLISH is replicated (or broadcast to a Cluster's
// every node) like a write. With a waiter, the release wakes it.
func TestReleaseWakesOnlyQueued(t *testing.T) {
	t.Parallel()
	node := testenv.StartRedisServer(t)
	rdb := node.Client()
	t.Cleanup(func() { rdb.Close() })
	// Pub/Sub off for the waiter, so only the poll could wake it: a long
	// one, beyond the test's wait for the grant.
	l := startLimiter(t, rdb, "w:", "chat", Config{MaxConcurrent: 1, MaxWait: time.Minute,
		Lease: 30 * time.Second, PollInterval: time.Minute})
	publishes := func() int {
		info := rdb.Info(t.Context(), "commandstats").Val()
		_, rest, ok := strings.Cut(info, "cmdstat_publish:calls=")
		if !ok {
			return 0
		}
		n, _ := strconv.Atoi(rest[:strings.IndexAny(rest, ",\r\n")])
		return n
	}
	for i := range 3 {
		mustAcquire(t, l, fmt.Sprint("alone", i), "u").Release()
	}
	if n := publishes(); n != 0 {
		t.Errorf("%d notifications published by releases with nobody queued, want 0", n)
	}
	holder := mustAcquire(t, l, "holder", "h")
	done := acquireQueued(t.Context(), l, "waiter", "w")
	holder.Release()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.p.Release()
	case <-time.After(30 * time.Second):
		t.Fatal("the queued request was not woken by the release")
	}
	if n := publishes(); n != 1 {
		t.Errorf("%d notifications published, want 1 (the release with a waiter)", n)
	}
}
