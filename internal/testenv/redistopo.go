package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelTopology is a private Sentinel deployment of the test's own: a
// primary, its replica and three Sentinels on free loopback ports, for a
// test that kills the primary (the shared redis-sentinel service is never
// disturbed).
type SentinelTopology struct {
	Master           string // the master name the Sentinels monitor
	Primary, Replica *RedisProc
	Sentinels        []*RedisProc
	DownAfter        time.Duration // Sentinel's down-after-milliseconds
}

// StartSentinelTopology starts the primary, the replica and three Sentinels
// with a quorum of two that declare the primary down after downAfter, and
// waits until the replica is in sync and every Sentinel knows the replica
// and the two others.
func StartSentinelTopology(t testing.TB, master string, downAfter time.Duration) *SentinelTopology {
	t.Helper()
	s := &SentinelTopology{Master: master, DownAfter: downAfter}
	s.Primary, s.Replica = StartPrimaryReplica(t)
	for range 3 {
		s.Sentinels = append(s.Sentinels, startSentinel(t, master, s.Primary.Addr, downAfter))
	}
	for _, sp := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sp.Addr, DialTimeout: time.Second})
		Eventually(t, 30*time.Second, "Sentinel "+sp.Addr+" to see the replica and two Sentinels", func() bool {
			m, err := c.Master(context.Background(), master).Result()
			return err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2"
		})
		c.Close()
	}
	return s
}

// startSentinel runs redis-server --sentinel on a free port with a
// configuration file of its own (Sentinel rewrites it).
func startSentinel(t testing.TB, master, primary string, downAfter time.Duration) *RedisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server", err)
	}
	port := FreePort(t)
	dir := t.TempDir()
	host, pport, _ := strings.Cut(primary, ":")
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s %s %s 2\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s 10000\n"+
		"sentinel parallel-syncs %s 1\n",
		port, dir, master, host, pport, master, downAfter.Milliseconds(), master, master)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &RedisProc{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin, args: []string{conf, "--sentinel"}}
	t.Cleanup(p.Kill)
	p.Start(t)
	return p
}

// SentinelAddrs are the Sentinels' host:port.
func (s *SentinelTopology) SentinelAddrs() []string { return procAddrs(s.Sentinels) }

// MasterAddr is the primary's address as the first Sentinel that answers
// reports it ("" if none does).
func (s *SentinelTopology) MasterAddr() string {
	for _, p := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: p.Addr, DialTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := c.GetMasterAddrByName(ctx, s.Master).Result()
		cancel()
		c.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1])
		}
	}
	return ""
}

// ClusterTopology is a private Redis Cluster of the test's own: three
// masters with a replica each on free loopback ports, for a test that
// kills a master.
type ClusterTopology struct {
	Nodes       []*RedisProc
	NodeTimeout time.Duration // cluster-node-timeout
}

// StartClusterTopology starts six cluster nodes with cluster-node-timeout
// nodeTimeout, joins them with redis-cli --cluster create (a replica per
// master) and waits until every node reports the cluster ok and every
// replica is in sync.
func StartClusterTopology(t testing.TB, nodeTimeout time.Duration) *ClusterTopology {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(t, "redis-cli", err)
	}
	c := &ClusterTopology{NodeTimeout: nodeTimeout}
	c.Nodes = startClusterNodes(t, 6, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10))
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, c.Addrs()...),
		"--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, p := range c.Nodes {
		nc := p.Client()
		Eventually(t, 30*time.Second, p.Addr+" to report the cluster ok and in sync", func() bool {
			ctx := context.Background()
			info, err := nc.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
				return false
			}
			repl, err := nc.Info(ctx, "replication").Result()
			return err == nil && (strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up"))
		})
		nc.Close()
	}
	return c
}

// startClusterNodes starts n redis-servers with args on ports free with
// their bus ports. A port taken between the pick and the bind (the process
// exits at once, StartRedisServer) has every node started again on new
// ports.
func startClusterNodes(t testing.TB, n int, args ...string) []*RedisProc {
	t.Helper()
	return onFreePorts(t, func() ([]*RedisProc, error) {
		var nodes []*RedisProc
		for _, port := range clusterPorts(t, n) {
			p := newRedisProc(t, "redis-server", port, args...)
			if err := p.start(); err != nil {
				for _, started := range nodes {
					started.Kill()
				}
				return nil, err
			}
			nodes = append(nodes, p)
		}
		return nodes, nil
	})
}

// clusterPorts picks n loopback ports that are free together with their
// cluster bus ports (port + 10000).
func clusterPorts(t testing.TB, n int) []int {
	t.Helper()
	free := func(port int) bool {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatal("no free pair of a port and its cluster bus port")
		}
		port := 20000 + rand.IntN(25000)
		if free(port) && free(port+10000) {
			ports = append(ports, port)
		}
	}
	return ports
}

// Addrs are the nodes' host:port.
func (c *ClusterTopology) Addrs() []string { return procAddrs(c.Nodes) }

// procAddrs are the processes' host:port, in their order.
func procAddrs(procs []*RedisProc) []string {
	var out []string
	for _, p := range procs {
		out = append(out, p.Addr)
	}
	return out
}

// Owner returns the address of the master serving key's slot, as the first
// node other than skip that answers sees it ("" if none does).
func (c *ClusterTopology) Owner(key, skip string) string {
	for _, p := range c.Nodes {
		if p.Addr == skip {
			continue
		}
		nc := p.Client()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		owner := slotOwner(ctx, nc, key)
		cancel()
		nc.Close()
		if owner != "" {
			return owner
		}
	}
	return ""
}

func slotOwner(ctx context.Context, nc *redis.Client, key string) string {
	slot, err := nc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return ""
	}
	info, err := nc.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		return ""
	}
	shards, err := nc.ClusterShards(ctx).Result()
	if err != nil {
		return ""
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				}
			}
		}
	}
	return ""
}

// Node returns the node at addr (nil if none).
func (c *ClusterTopology) Node(addr string) *RedisProc {
	for _, p := range c.Nodes {
		if p.Addr == addr {
			return p
		}
	}
	return nil
}
