package testenv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// StartPrimaryReplica starts a standalone primary and one replica of it,
// both processes of the test's own, and waits until the replica is in
// sync.
func StartPrimaryReplica(t testing.TB) (primary, replica *RedisProc) {
	t.Helper()
	primary = StartRedisServer(t)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica = StartRedisServer(t, "--replicaof", host, port)
	rc := replica.Client()
	defer rc.Close()
	Eventually(t, 20*time.Second, "the replica in sync", func() bool {
		info, _ := rc.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	return primary, replica
}
