// Package testenv connects tests to the real services that scripts/services.sh
// starts (Postgres+pgvector, Redis, RocketMQ, the local embedding model,
// OpenSearch).
//
// A test that needs a service calls the matching helper. When the service is
// unreachable the test is skipped on a developer machine, but fails when
// RAGENT_REQUIRE_SERVICES=1 (set by .ci/run and `make test`), so CI never
// passes by silently skipping.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/redisconn"
)

// Defaults match what scripts/services.sh sets up.
const (
	defaultDatabaseURL = "postgres://ragent:ragent@127.0.0.1:5432/ragent_test?sslmode=disable"
	defaultRedisURL    = "redis://127.0.0.1:6379/15"
	// The redis-sentinel and redis-cluster services of scripts/services.sh.
	defaultSentinelAddrs  = "127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381"
	defaultSentinelMaster = "ragent"
	defaultClusterAddrs   = "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005"
	defaultNamesrv        = "127.0.0.1:9876"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Required reports whether a missing service must fail the test run.
func Required() bool { return os.Getenv("RAGENT_REQUIRE_SERVICES") == "1" }

// unavailable fails or skips t, depending on Required.
func unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%s unavailable (RAGENT_REQUIRE_SERVICES=1): %v; run scripts/services.sh start", service, err)
	}
	t.Skipf("%s unavailable: %v; run scripts/services.sh start", service, err)
}

// RedisTopology is the Redis topology the tests run against, from
// RAGENT_TEST_REDIS_TOPOLOGY: single (the default), sentinel or cluster
// (scripts/services.sh start redis-sentinel, redis-cluster; make test runs
// the Redis-backed suites once per topology).
func RedisTopology() redisconn.Topology {
	return redisconn.Topology(env("RAGENT_TEST_REDIS_TOPOLOGY", string(redisconn.Single)))
}

// RedisURL returns the URL of the single test Redis node, failing or
// skipping when Redis is down. Under another topology it skips the test: a
// test that reaches one node by its URL (a proxy in front of it, a client
// of its own) runs in the single-node pass.
func RedisURL(t testing.TB) string {
	t.Helper()
	if top := RedisTopology(); top != redisconn.Single {
		t.Skipf("this test uses the single Redis node; RAGENT_TEST_REDIS_TOPOLOGY=%s runs it in the single pass", top)
	}
	return pingedRedisURL(t)
}

func pingedRedisURL(t testing.TB) string {
	t.Helper()
	u := env("RAGENT_TEST_REDIS_URL", defaultRedisURL)
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("RAGENT_TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(t, "redis", err)
	}
	return u
}

// RedisOptions says where the test Redis of RedisTopology is (the settings
// an instance under test gets), failing or skipping when it is down. On
// Sentinel the database is RAGENT_TEST_REDIS_URL's; a Cluster has only
// database 0, so there tests are kept apart by their key prefix alone.
func RedisOptions(t testing.TB) redisconn.Options {
	t.Helper()
	return RedisOptionsOf(t, RedisTopology())
}

// RedisOptionsOf is RedisOptions for topology top, whatever
// RAGENT_TEST_REDIS_TOPOLOGY says (benchmarks that compare the topologies
// in one run).
func RedisOptionsOf(t testing.TB, top redisconn.Topology) redisconn.Options {
	t.Helper()
	var o redisconn.Options
	switch top {
	case redisconn.Single:
		return redisconn.Options{URL: pingedRedisURL(t)}
	case redisconn.Sentinel:
		o = redisconn.Options{
			URL:            env("RAGENT_TEST_REDIS_URL", defaultRedisURL),
			SentinelAddrs:  strings.Split(env("RAGENT_TEST_REDIS_SENTINEL_ADDRS", defaultSentinelAddrs), ","),
			SentinelMaster: env("RAGENT_TEST_REDIS_SENTINEL_MASTER", defaultSentinelMaster),
		}
	case redisconn.Cluster:
		u, err := url.Parse(env("RAGENT_TEST_REDIS_URL", defaultRedisURL))
		if err != nil {
			t.Fatalf("RAGENT_TEST_REDIS_URL: %v", err)
		}
		u.Path = "/0"
		o = redisconn.Options{URL: u.String(), ClusterAddrs: clusterAddrs()}
	default:
		t.Fatalf("RAGENT_TEST_REDIS_TOPOLOGY=%q: want single, sentinel or cluster", top)
	}
	c, err := redisconn.New(o)
	if err != nil {
		t.Fatalf("redis %s: %v", top, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(t, "redis "+string(top), err)
	}
	return o
}

func clusterAddrs() []string {
	return strings.Split(env("RAGENT_TEST_REDIS_CLUSTER_ADDRS", defaultClusterAddrs), ",")
}

// Redis returns a new client on the test Redis of RedisTopology, closed when
// the test ends. Every test gets its own client, like a separate instance
// would. The client records the keys of every script it runs, and the test
// fails if one script call's keys are not all in one Redis Cluster slot
// (checkSlots).
func Redis(t testing.TB) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.New(RedisOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	h := &slotHook{}
	c.AddHook(h)
	hooks.Store(c, h)
	t.Cleanup(func() {
		c.Close()
		h.check(t)
		hooks.Delete(c)
	})
	return c
}

// Prefix returns a unique key prefix so tests sharing one Redis never collide.
func Prefix(t testing.TB) string {
	t.Helper()
	return "test:" + RandomSuffix() + ":"
}

// RandomSuffix returns 8 random hex characters.
func RandomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DatabaseURL returns the admin URL of the test database server (the
// ragent_test database), failing or skipping when Postgres is down.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	u := env("RAGENT_TEST_DATABASE_URL", defaultDatabaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		unavailable(t, "postgres", err)
	}
	conn.Close(ctx)
	return u
}

// FreshDatabase creates an empty database for this test only and returns its
// URL; the database is dropped when the test ends. It is a copy of template1,
// where scripts/services.sh installs the vector extension (the test role is
// not a superuser and cannot create it).
func FreshDatabase(t testing.TB) string {
	t.Helper()
	return freshDatabase(t, "template1")
}

// FreshBareDatabase is FreshDatabase from template0: no vector extension,
// as on a server where nobody prepared template1.
func FreshBareDatabase(t testing.TB) string {
	t.Helper()
	return freshDatabase(t, "template0")
}

func freshDatabase(t testing.TB, template string) string {
	t.Helper()
	base := DatabaseURL(t)
	name := "t_" + strings.ToLower(RandomSuffix()) + RandomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	pu, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	pu.Path = "/" + name
	return pu.String()
}

// RocketMQNamesrv returns the NameServer address, failing or skipping when
// nothing listens there.
func RocketMQNamesrv(t testing.TB) string {
	t.Helper()
	addr := env("RAGENT_TEST_ROCKETMQ_NAMESRV", defaultNamesrv)
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		unavailable(t, "rocketmq", fmt.Errorf("namesrv %s: %w", addr, err))
	}
	c.Close()
	return addr
}

// RedisProxyURL starts a Proxy in front of the test Redis and returns it with
// a Redis URL that goes through it.
func RedisProxyURL(t testing.TB) (*Proxy, string) {
	t.Helper()
	return proxyURL(t, RedisURL(t))
}

// PostgresProxyURL returns a fresh database (see FreshDatabase) reached
// through a Proxy, so a test can take Postgres away from the code under test.
func PostgresProxyURL(t testing.TB) (*Proxy, string) {
	t.Helper()
	return proxyURL(t, FreshDatabase(t))
}

// proxyURL starts a Proxy in front of rawURL's host and returns rawURL
// pointed at it.
func proxyURL(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// Keys returns the keys matching pattern on every node that holds keys (each
// master of a Cluster), so a test can look for leftovers on any topology.
func Keys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.Cmdable) ([]string, error) {
		var out []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return out, iter.Err()
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var (
		mu  sync.Mutex
		out []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	return out, err
}
