// Package redisconn opens the one Redis client every ragent mechanism shares,
// on whichever of three topologies runs Redis: a single node, a primary with
// replicas behind Sentinel, or a Redis Cluster (docs/operations.md "Running Redis in
// production").
//
// The mechanisms take a redis.UniversalClient and keep each script's keys
// under one hash tag, so the same code runs on all three; this package only
// decides which client to build.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topology names how Redis is deployed.
type Topology string

const (
	Single   Topology = "single"
	Sentinel Topology = "sentinel"
	Cluster  Topology = "cluster"
)

// Options says where Redis is. URL is a redis:// or rediss:// URL: on a
// single node its address too; with SentinelAddrs or ClusterAddrs set only
// its user, password, TLS (rediss) and, for Sentinel, its database number
// count, and its host is ignored.
type Options struct {
	URL string
	// SentinelAddrs (host:port) of the Sentinels watching SentinelMaster.
	SentinelAddrs    []string
	SentinelMaster   string
	SentinelPassword string // the Sentinels' own password, if they have one
	// ClusterAddrs (host:port) are seed nodes of a Redis Cluster; the
	// client discovers the rest.
	ClusterAddrs []string
}

// ErrTwoTopologies means both Sentinel and Cluster addresses were given.
var ErrTwoTopologies = errors.New("redis: both Sentinel and Cluster addresses are set; choose one")

// Topology reports which topology o describes, or an error when it is
// contradictory or incomplete.
func (o Options) Topology() (Topology, error) {
	switch {
	case len(o.SentinelAddrs) > 0 && len(o.ClusterAddrs) > 0:
		return "", ErrTwoTopologies
	case len(o.SentinelAddrs) > 0:
		if o.SentinelMaster == "" {
			return "", errors.New("redis: Sentinel addresses without a master name")
		}
		return Sentinel, nil
	case len(o.ClusterAddrs) > 0:
		return Cluster, nil
	case o.SentinelMaster != "" || o.SentinelPassword != "":
		return "", errors.New("redis: a Sentinel master name or password without Sentinel addresses")
	}
	return Single, nil
}

// Fail fast when Redis is away: every Redis-backed mechanism degrades
// (DESIGN §11), and a request should not first wait seconds for retries.
const (
	dialTimeout   = 2 * time.Second
	dialerRetries = 1
	maxRetries    = 1
)

// clusterReloadInterval bounds how long a Cluster client may route by a
// stale slot map when no error tells it to reload (go-redis: 60 s).
const clusterReloadInterval = 5 * time.Second

// reloadOnNodeFailure makes a Cluster client reload its slot map when a
// command fails on the network (or the cluster says it is down). go-redis
// reloads only on MOVED, READONLY or its reload interval: after a master
// dies, its slots keep going to the dead address, connection refused, and
// the promoted replica is never asked. The failover test (RELIABILITY.md)
// saw one of three instances refused for a minute after the promotion:
// its releases never reached Redis (3 permits left), its chats timed out
// in the queue, and a stop waited 54 s. The reload is asynchronous and
// coalesced by go-redis, so a burst of failures costs a few CLUSTER SLOTS.
type reloadOnNodeFailure struct{ cc *redis.ClusterClient }

func (h reloadOnNodeFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNodeFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNodeFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnNodeFailure) check(ctx context.Context, err error) {
	if nodeFailure(err) {
		h.cc.ReloadState(ctx)
	}
}

// nodeFailure reports whether err says a node is unreachable or the
// cluster is failing over, not a reply to the command (redis.Nil, a script
// error) or the caller cancelling. A deadline counts (context's deadline
// error is a net.Error): a node that hangs rather than refuses looks so.
func nodeFailure(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "CLUSTERDOWN") || strings.HasPrefix(msg, "TRYAGAIN")
}

// New returns a client for o. A Sentinel client always talks to the current
// primary (it follows promotions); a Cluster client routes each command to
// its slot's master, follows MOVED replies after a failover, and reloads
// its slot map when a node fails (reloadOnNodeFailure).
func New(o Options) (redis.UniversalClient, error) {
	topology, err := o.Topology()
	if err != nil {
		return nil, err
	}
	u, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("redis: URL: %w", err)
	}
	if topology != Single && u.TLSConfig != nil {
		// The URL's host is not a node's: let each connection check the
		// certificate against the address it dials.
		u.TLSConfig = u.TLSConfig.Clone()
		u.TLSConfig.ServerName = ""
	}
	switch topology {
	case Sentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:       o.SentinelMaster,
			SentinelAddrs:    o.SentinelAddrs,
			SentinelPassword: o.SentinelPassword,
			Username:         u.Username,
			Password:         u.Password,
			DB:               u.DB,
			TLSConfig:        u.TLSConfig,
			DialTimeout:      dialTimeout,
			DialerRetries:    dialerRetries,
			MaxRetries:       maxRetries,
		}), nil
	case Cluster:
		if u.DB != 0 {
			return nil, fmt.Errorf("redis: the URL selects database %d, but a Redis Cluster has only database 0", u.DB)
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                      o.ClusterAddrs,
			Username:                   u.Username,
			Password:                   u.Password,
			TLSConfig:                  u.TLSConfig,
			DialTimeout:                dialTimeout,
			DialerRetries:              dialerRetries,
			MaxRetries:                 maxRetries,
			ClusterStateReloadInterval: clusterReloadInterval,
		})
		cc.AddHook(reloadOnNodeFailure{cc})
		return cc, nil
	}
	u.DialTimeout, u.DialerRetries, u.MaxRetries = dialTimeout, dialerRetries, maxRetries
	return redis.NewClient(u), nil
}
