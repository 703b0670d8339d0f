package redisconn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/internal/testenv"
)

// Each topology gets the client that follows it, and contradictory or
// impossible settings are refused before anything connects.
func TestNew(t *testing.T) {
	bad := []struct {
		name string
		o    redisconn.Options
		want string
	}{
		{"both", redisconn.Options{URL: "redis://x/0", SentinelAddrs: []string{"s:1"}, SentinelMaster: "m",
			ClusterAddrs: []string{"n:1"}}, "both Sentinel and Cluster"},
		{"sentinel without master", redisconn.Options{URL: "redis://x/0", SentinelAddrs: []string{"s:1"}}, "master name"},
		{"master without sentinels", redisconn.Options{URL: "redis://x/0", SentinelMaster: "m"}, "without Sentinel addresses"},
		{"cluster with a database", redisconn.Options{URL: "redis://x/3", ClusterAddrs: []string{"n:1"}}, "only database 0"},
		{"bad URL", redisconn.Options{URL: "http://x"}, "URL"},
	}
	for _, tt := range bad {
		if _, err := redisconn.New(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	if _, err := (redisconn.Options{SentinelAddrs: []string{"s:1"}, ClusterAddrs: []string{"n:1"}}).Topology(); !errors.Is(err, redisconn.ErrTwoTopologies) {
		t.Errorf("Topology() = %v, want ErrTwoTopologies", err)
	}

	// The Sentinel client takes the password, TLS and database from the URL
	// and ignores its host.
	c, err := redisconn.New(redisconn.Options{URL: "rediss://:pw@ignored.example:1/5",
		SentinelAddrs: []string{"s:26379"}, SentinelMaster: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("sentinel client is %T", c)
	}
	if o := fc.Options(); o.Password != "pw" || o.DB != 5 || o.TLSConfig == nil || o.TLSConfig.ServerName != "" || o.Addr == "ignored.example:1" {
		t.Errorf("sentinel client options: password %q, db %d, tls %v, addr %s", o.Password, o.DB, o.TLSConfig, o.Addr)
	}
	cc, err := redisconn.New(redisconn.Options{URL: "redis://:pw@ignored.example:1/0", ClusterAddrs: []string{"n:7000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if o := cc.(*redis.ClusterClient).Options(); o.Password != "pw" || len(o.Addrs) != 1 || o.Addrs[0] != "n:7000" {
		t.Errorf("cluster client options: password %q, addrs %v", o.Password, o.Addrs)
	}
}

// On the test topology (RAGENT_TEST_REDIS_TOPOLOGY) the client reaches a
// primary that takes writes.
func TestWritesOnTestTopology(t *testing.T) {
	c, err := redisconn.New(testenv.RedisOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := testenv.Prefix(t) + "redisconn"
	if err := c.Set(t.Context(), key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Del(t.Context(), key)
	if v := c.Get(t.Context(), key).Val(); v != "1" {
		t.Fatalf("GET = %q", v)
	}
}

// After a master dies and its replica is promoted, a Cluster client reaches
// the key again within seconds: it reloads its slot map when a node fails
// (go-redis alone kept sending the slot to the dead master for its 60 s
// reload interval, and the failover test left permits unreleased).
func TestClusterClientFollowsPromotion(t *testing.T) {
	c := testenv.StartClusterTopology(t, time.Second)
	rdb, err := redisconn.New(redisconn.Options{URL: "redis://" + c.Nodes[0].Addr + "/0", ClusterAddrs: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	const key = "{redisconn-test}:k"
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	victim := c.Owner(key, "")
	c.Node(victim).Kill()
	// The client fails meanwhile, as it would under load.
	rdb.Get(ctx, key)
	testenv.Eventually(t, 60*time.Second, "the cluster to promote the replica", func() bool {
		owner := c.Owner(key, victim)
		return owner != "" && owner != victim
	})
	promoted := time.Now()
	// Reached, the key is there or (lost with the master's last writes) not.
	reached := func() bool { err := rdb.Get(ctx, key).Err(); return err == nil || errors.Is(err, redis.Nil) }
	for !reached() {
		if time.Since(promoted) > 5*time.Second {
			t.Fatalf("the client still fails %v after the promotion: %v", time.Since(promoted), rdb.Get(ctx, key).Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
