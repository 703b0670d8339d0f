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
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Defaults match what scripts/services.sh sets up.
const (
	defaultDatabaseURL = "postgres://ragent:ragent@127.0.0.1:5432/ragent_test?sslmode=disable"
	defaultRedisURL    = "redis://127.0.0.1:6379/15"
	defaultNamesrv     = "127.0.0.1:9876"
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

// RedisURL returns the Redis URL for tests, failing or skipping when Redis is down.
func RedisURL(t testing.TB) string {
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

// Redis returns a new client on the test Redis, closed when the test ends.
// Every test gets its own client, like a separate instance would.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opt, _ := redis.ParseURL(RedisURL(t))
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
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
