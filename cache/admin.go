package cache

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// AdminTTL is how long the admin caches (intent tree, term mappings) live in
// Redis. Writes delete them, so the TTL only bounds how long a copy that
// missed its invalidation (Redis unreachable during a write) can live.
const AdminTTL = 7 * 24 * time.Hour

const (
	// loadTimeout bounds one shared rebuild from Postgres. It is detached
	// from the first caller's context so that caller hanging up does not
	// fail the others waiting on the same load.
	loadTimeout = 10 * time.Second
	// redisTimeout bounds the Redis calls made outside a request's context.
	redisTimeout = 2 * time.Second
)

// Metrics counts what the admin caches do. One Metrics is shared by every
// cache of an instance.
type Metrics struct {
	lookups      *prometheus.CounterVec // cache, result: hit | miss
	loads        *prometheus.CounterVec // cache
	fallbacks    *prometheus.CounterVec // cache
	invalidateEr *prometheus.CounterVec // cache
}

// NewMetrics creates the cache counters and registers them with reg (nil
// keeps them unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_cache_lookups_total", Help: "Admin cache lookups by cache and result (hit, miss).",
		}, []string{"cache", "result"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_cache_loads_total", Help: "Admin cache rebuilds from Postgres (one per miss per instance, shared by concurrent readers).",
		}, []string{"cache"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_cache_fallback_total", Help: "Admin cache reads served from Postgres because Redis failed.",
		}, []string{"cache"}),
		invalidateEr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_cache_invalidation_errors_total", Help: "Admin cache invalidations that failed on Redis; the old copy may live until its TTL.",
		}, []string{"cache"}),
	}
	if reg != nil {
		reg.MustRegister(m.lookups, m.loads, m.fallbacks, m.invalidateEr)
	}
	return m
}

// jsonCache is a cache-aside copy of one Postgres-backed value as JSON under
// one key, rebuilt at most once at a time per instance after a miss.
//
// Invalidation must not lose to a rebuild that read Postgres before the
// write committed and stores its stale copy after the write deleted the key.
// So a write first replaces a version token ({key}:version) and then deletes
// the key; a rebuild reads the token before loading, and after storing its
// copy reads it again: if it changed, a write raced the load and the copy is
// deleted. Each step is a single-key command, so this also holds on Redis
// Cluster.
type jsonCache struct {
	rdb        redis.UniversalClient
	name       string // metric label and log attribute
	key        string
	versionKey string
	ttl        time.Duration
	load       func(ctx context.Context) (any, error)
	group      singleflight.Group
	metrics    *Metrics
	log        *slog.Logger
}

// Config is what the admin caches take besides their client and loader.
type Config struct {
	Metrics *Metrics     // shared by every cache of an instance; nil counts unexported
	Logger  *slog.Logger // Redis failures; nil discards
}

// listLoader adapts a loader of a list to jsonCache; an empty list is cached
// too (as [], not null).
func listLoader[E any](load func(ctx context.Context) ([]E, error)) func(ctx context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		list, err := load(ctx)
		if list == nil && err == nil {
			list = []E{}
		}
		return list, err
	}
}

// decodeList decodes what jsonCache.get returned: each call gets its own
// copy, never nil on success.
func decodeList[E any](b []byte, err error) ([]E, error) {
	if err != nil {
		return nil, err
	}
	list := []E{}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	return list, nil
}

func newJSONCache(rdb redis.UniversalClient, name, key string, load func(ctx context.Context) (any, error), cfg Config) *jsonCache {
	cfg.Metrics = cmp.Or(cfg.Metrics, NewMetrics(nil))
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &jsonCache{rdb: rdb, name: name, key: key, versionKey: key + ":version", ttl: AdminTTL,
		load: load, metrics: cfg.Metrics, log: cfg.Logger}
}

// get returns the cached JSON, rebuilding it from Postgres on a miss. Redis
// errors never fail it: the value is then loaded from Postgres.
func (c *jsonCache) get(ctx context.Context) ([]byte, error) {
	b, err := c.rdb.Get(ctx, c.key).Bytes()
	switch {
	case err == nil:
		c.metrics.lookups.WithLabelValues(c.name, "hit").Inc()
		return b, nil
	case errors.Is(err, redis.Nil):
		c.metrics.lookups.WithLabelValues(c.name, "miss").Inc()
		return c.shared(ctx, true)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		c.fallback(ctx, "read", err)
		return c.shared(ctx, false)
	}
}

// shared runs one rebuild for every concurrent caller on this instance.
func (c *jsonCache) shared(ctx context.Context, fill bool) ([]byte, error) {
	flight := "load"
	if !fill {
		// Redis is failing: load without touching it, in a flight of its own
		// so a healthy rebuild's result is not mistaken for one.
		flight = "fallback"
	}
	ch := c.group.DoChan(flight, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
		defer cancel()
		return c.rebuild(lctx, fill)
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.([]byte), nil
	}
}

func (c *jsonCache) rebuild(ctx context.Context, fill bool) ([]byte, error) {
	var before string
	if fill {
		v, err := c.rdb.Get(ctx, c.versionKey).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			c.fallback(ctx, "read version", err)
			fill = false
		}
		before = v
	}
	c.metrics.loads.WithLabelValues(c.name).Inc()
	v, err := c.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", c.name, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", c.name, err)
	}
	if !fill {
		return b, nil
	}
	if err := c.rdb.Set(ctx, c.key, b, c.ttl).Err(); err != nil {
		c.log.WarnContext(ctx, "cache: could not store the rebuilt copy", "cache", c.name, "err", err)
		return b, nil
	}
	after, err := c.rdb.Get(ctx, c.versionKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) || after != before {
		// A write committed while we loaded (or we cannot tell): our copy
		// may predate it, so drop it; the next reader rebuilds. Our caller
		// still gets what Postgres said when it asked.
		if err := c.rdb.Del(ctx, c.key).Err(); err != nil {
			c.log.WarnContext(ctx, "cache: could not drop a copy raced by a write", "cache", c.name, "err", err)
		}
	}
	return b, nil
}

func (c *jsonCache) fallback(ctx context.Context, op string, err error) {
	c.metrics.fallbacks.WithLabelValues(c.name).Inc()
	c.log.WarnContext(ctx, "cache: redis failed; serving from postgres", "cache", c.name, "op", op, "err", err)
}

// invalidate drops the cached copy; call it after the write has committed.
func (c *jsonCache) invalidate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	var token [16]byte
	_, _ = rand.Read(token[:])
	// The token outlives any copy a racing rebuild could store.
	err := c.rdb.Set(ctx, c.versionKey, hex.EncodeToString(token[:]), c.ttl+time.Hour).Err()
	if err == nil {
		err = c.rdb.Del(ctx, c.key).Err()
	}
	if err != nil {
		c.metrics.invalidateEr.WithLabelValues(c.name).Inc()
		return fmt.Errorf("invalidate %s cache: %w", c.name, err)
	}
	return nil
}
