package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// never is a check interval long enough that only Pub/Sub can deliver a stop
// within a test.
const never = time.Hour

func waitSubscribers(t *testing.T, rdb redis.UniversalClient, channel string, want int64) {
	t.Helper()
	testenv.Eventually(t, 3*time.Second, fmt.Sprintf("%d subscribers on %s", want, channel), func() bool {
		return rdb.PubSubNumSub(t.Context(), channel).Val()[channel] == want
	})
}

func register(t *testing.T, m *Manager, taskID, owner string) (context.Context, func()) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	unregister, err := m.Register(t.Context(), taskID, owner, cancel)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(unregister)
	return ctx, unregister
}

// waitStopped fails unless ctx is cancelled with ErrStopped within d. Where
// the flag check is off (CheckInterval: never) any stop at all proves the
// Pub/Sub path, so callers give a loaded machine seconds, not milliseconds.
func waitStopped(t *testing.T, ctx context.Context, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(d):
			t.Fatalf("task not cancelled within %s", d)
		}
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrStopped) || !errors.Is(cause, service.ErrStopped) {
		t.Fatalf("cancel cause %v, want ErrStopped wrapping service.ErrStopped", cause)
	}
	return time.Since(start)
}

func assertRunning(t *testing.T, ctx context.Context) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("task cancelled: %v", context.Cause(ctx))
	}
}

func TestStopOnOtherInstanceCancelsViaPubSub(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	a := NewManager(testenv.Redis(t), prefix, "a", Config{CheckInterval: never})
	b := NewManager(testenv.Redis(t), prefix, "b", Config{CheckInterval: never})
	testenv.Run(t, a.Run)
	testenv.Run(t, b.Run)
	waitSubscribers(t, rdb, a.channel(), 2)

	ctx, _ := register(t, a, "task-1", "user-1")
	other, _ := register(t, a, "task-2", "user-1")
	assertRunning(t, ctx)

	start := time.Now()
	local, err := b.Cancel(t.Context(), "task-1")
	if err != nil || local {
		t.Fatalf("Cancel on B = %v, %v; want false, nil", local, err)
	}
	waitStopped(t, ctx, 5*time.Second)
	t.Logf("stop on B reached the task on A in %s", time.Since(start))
	assertRunning(t, other)
}

func TestStopBeforeRegisterWins(t *testing.T) {
	prefix := testenv.Prefix(t)
	a := NewManager(testenv.Redis(t), prefix, "a", Config{})
	b := NewManager(testenv.Redis(t), prefix, "b", Config{})

	if _, err := b.Cancel(t.Context(), "early"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	ctx, _ := register(t, a, "early", "user-1")
	if ctx.Err() == nil {
		t.Fatal("task registered after its stop is still running")
	}
	waitStopped(t, ctx, 0)
}

func TestCancelSetsFlagForThirtyMinutes(t *testing.T) {
	rdb := testenv.Redis(t)
	m := NewManager(testenv.Redis(t), testenv.Prefix(t), "a", Config{})
	local, err := m.Cancel(t.Context(), "nowhere")
	if err != nil || local {
		t.Fatalf("Cancel = %v, %v; want false, nil", local, err)
	}
	ttl := rdb.PTTL(t.Context(), m.cancelKey("nowhere")).Val()
	if ttl < 29*time.Minute || ttl > 30*time.Minute {
		t.Fatalf("flag TTL %s, want ~30m", ttl)
	}
}

func TestLocalCancelIsImmediate(t *testing.T) {
	m := NewManager(testenv.Redis(t), testenv.Prefix(t), "a", Config{CheckInterval: never})
	ctx, _ := register(t, m, "t", "u")
	local, err := m.Cancel(t.Context(), "t")
	if err != nil || !local {
		t.Fatalf("Cancel = %v, %v; want true, nil", local, err)
	}
	waitStopped(t, ctx, 0)
	// A second stop (a double click) is harmless.
	if local, err := m.Cancel(t.Context(), "t"); err != nil || !local {
		t.Fatalf("second Cancel = %v, %v; want true, nil", local, err)
	}
}

func TestRecordLifecycle(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	// Refreshed every 300 ms: a refresh stalled for 600 ms on a loaded
	// machine (-race, parallel builds) still keeps the record.
	const ttl = 900 * time.Millisecond
	a := NewManager(testenv.Redis(t), prefix, "instance-a", Config{TaskTTL: ttl})
	b := NewManager(testenv.Redis(t), prefix, "instance-b", Config{})
	testenv.Run(t, a.Run)

	if _, err := b.Owner(t.Context(), "t1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Owner before register: %v, want ErrNotFound", err)
	}
	_, unregister := register(t, a, "t1", "user-7")
	if _, err := a.Register(t.Context(), "t1", "user-7", func(error) {}); !errors.Is(err, ErrRegistered) {
		t.Fatalf("second Register: %v, want ErrRegistered", err)
	}

	// The record outlives its TTL a few times while the task runs.
	time.Sleep(3 * ttl)
	user, err := b.Owner(t.Context(), "t1")
	instance := rdb.HGet(t.Context(), a.taskKey("t1"), "instance").Val()
	if err != nil || user != "user-7" || instance != "instance-a" {
		t.Fatalf("Owner = %q, %q, %v; want user-7, instance-a", user, instance, err)
	}
	if left := rdb.PTTL(t.Context(), a.taskKey("t1")).Val(); left <= 0 || left > ttl {
		t.Fatalf("record TTL %s, want within (0, %s]", left, ttl)
	}

	unregister()
	unregister()
	if n := rdb.Exists(t.Context(), a.taskKey("t1")).Val(); n != 0 {
		t.Fatal("record still exists after unregister")
	}
	if _, err := b.Owner(t.Context(), "t1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Owner after unregister: %v, want ErrNotFound", err)
	}
	// The id is free again on this instance.
	register(t, a, "t1", "user-7")
}

func TestUnregisterKeepsAnotherInstancesRecord(t *testing.T) {
	prefix := testenv.Prefix(t)
	a := NewManager(testenv.Redis(t), prefix, "a", Config{})
	b := NewManager(testenv.Redis(t), prefix, "b", Config{})
	_, unregisterA := register(t, a, "shared", "u1")
	register(t, b, "shared", "u2")
	unregisterA()
	user, err := a.Owner(t.Context(), "shared")
	if instance := a.rdb.HGet(t.Context(), a.taskKey("shared"), "instance").Val(); err != nil || user != "u2" || instance != "b" {
		t.Fatalf("Owner = %q, %q, %v; want u2, b", user, instance, err)
	}
}

func TestFlagCheckCatchesLostMessage(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	a := NewManager(testenv.Redis(t), prefix, "a", Config{CheckInterval: 200 * time.Millisecond})
	testenv.Run(t, a.Run)
	ctx, _ := register(t, a, "t", "u")

	// A stop whose Pub/Sub message never arrived: only the flag is there.
	if err := rdb.Set(t.Context(), a.cancelKey("t"), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	took := waitStopped(t, ctx, 5*time.Second)
	t.Logf("flag check caught the stop in %s", took)
}

func TestSubscriptionReconnectsAfterDrop(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	opt, _ := redis.ParseURL(testenv.RedisURL(t))
	opt.ClientName = "stream-test-" + testenv.RandomSuffix()
	aClient := redis.NewClient(opt)
	t.Cleanup(func() { aClient.Close() })
	a := NewManager(aClient, prefix, "a", Config{CheckInterval: never})
	b := NewManager(testenv.Redis(t), prefix, "b", Config{})
	testenv.Run(t, a.Run)
	waitSubscribers(t, rdb, a.channel(), 1)

	killed := subscriberID(t, rdb, opt.ClientName)
	if err := rdb.Do(t.Context(), "CLIENT", "KILL", "ID", killed).Err(); err != nil {
		t.Fatal(err)
	}
	// The reconnect can be quicker than any poll for zero subscribers, so
	// wait for a subscriber connection other than the killed one.
	testenv.Eventually(t, 3*time.Second, "the subscription to be re-established", func() bool {
		return subscriberID(t, rdb, opt.ClientName) != killed
	})
	waitSubscribers(t, rdb, a.channel(), 1)

	ctx, _ := register(t, a, "t", "u")
	if _, err := b.Cancel(t.Context(), "t"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	waitStopped(t, ctx, 5*time.Second)
}

// subscriberID returns the id of the Pub/Sub connection of the client named
// name, or "" while it has none.
func subscriberID(t *testing.T, rdb redis.UniversalClient, name string) string {
	t.Helper()
	list, err := rdb.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(list) {
		var id, cname, cmd string
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "id":
				id = v
			case "name":
				cname = v
			case "cmd":
				cmd = v
			}
		}
		if cname == name && cmd == "subscribe" {
			return id
		}
	}
	return ""
}

func TestRedisDownLocalStopStillWorks(t *testing.T) {
	addr := testenv.FreeAddr(t)
	down := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { down.Close() })
	m := NewManager(down, "test:", "a", Config{})
	testenv.Run(t, m.Run)

	start := time.Now()
	ctx, unregister := register(t, m, "t", "u")
	t.Logf("Register with Redis down took %s", time.Since(start))
	assertRunning(t, ctx)
	start = time.Now()
	local, err := m.Cancel(t.Context(), "t")
	if !local || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Cancel = %v, %v; want true, ErrUnavailable", local, err)
	}
	waitStopped(t, ctx, 0)
	t.Logf("Cancel with Redis down took %s", time.Since(start))

	if local, err := m.Cancel(t.Context(), "elsewhere"); local || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Cancel of a remote task = %v, %v; want false, ErrUnavailable", local, err)
	}
	// The local registry answers for its own tasks, so a stop on this
	// instance can be authorized with Redis down; others need Redis.
	if user, err := m.Owner(t.Context(), "t"); err != nil || user != "u" {
		t.Fatalf("Owner of a local task = %q, %v; want u", user, err)
	}
	if _, err := m.Owner(t.Context(), "elsewhere"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Owner of a remote task: %v, want ErrUnavailable", err)
	}
	unregister()
}

// TestStopLostInAFailoverIsSentAgain loses both halves of a stop the way a
// failover does: the message is published while the running instance's
// subscription is down, and the flag is deleted as a promoted replica that
// never received it would lack it. The instance that accepted the stop
// writes it again until the task ends, so the task still stops.
func TestStopLostInAFailoverIsSentAgain(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	const check = 50 * time.Millisecond
	runner := NewManager(testenv.Redis(t), prefix, "runner", Config{CheckInterval: check})
	stopper := NewManager(testenv.Redis(t), prefix, "stopper", Config{CheckInterval: check})
	testenv.Run(t, stopper.Run)

	ctx, unregister := register(t, runner, "task-1", "user-1")
	if local, err := stopper.Cancel(t.Context(), "task-1"); err != nil || local {
		t.Fatalf("Cancel = %v, %v; want a remote stop delivered", local, err)
	}
	if err := rdb.Del(t.Context(), runner.cancelKey("task-1")).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, runner.Run) // subscribes after the message: it never sees it
	waitStopped(t, ctx, 5*time.Second)

	// Once the task has ended (its record is gone) the stop is forgotten.
	unregister()
	testenv.Eventually(t, 5*time.Second, "the stop to be forgotten", func() bool {
		stopper.mu.Lock()
		defer stopper.mu.Unlock()
		return len(stopper.stops) == 0
	})
}

// TestTaskRecordLostInAFailoverIsRewritten deletes a running task's record,
// as a failover that lost the registration would: a stop sent from another
// instance must find the task again within a few check intervals, not after
// a third of the record's TTL.
func TestTaskRecordLostInAFailoverIsRewritten(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	runner := NewManager(testenv.Redis(t), prefix, "runner", Config{CheckInterval: 50 * time.Millisecond})
	other := NewManager(testenv.Redis(t), prefix, "other", Config{})
	testenv.Run(t, runner.Run)

	register(t, runner, "task-1", "user-1")
	if err := rdb.Del(t.Context(), runner.taskKey("task-1")).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Second, "the task record to be rewritten", func() bool {
		owner, err := other.Owner(t.Context(), "task-1")
		return err == nil && owner == "user-1"
	})
}

// TestStopRightAfterRedisCameBackEmpty: Redis returns without its data
// (restarted empty after an outage, RELIABILITY.md), and a stop arrives at
// another instance before the runner has rewritten its task's record. The
// lookup must not answer "not found" for the running task (the stop would
// never be sent): it is refused as retryable until the record is back, and
// a client retrying it then stops the task.
func TestStopRightAfterRedisCameBackEmpty(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	const check = 300 * time.Millisecond
	runner := NewManager(testenv.Redis(t), prefix, "runner", Config{CheckInterval: check})
	stopper := NewManager(testenv.Redis(t), prefix, "stopper", Config{CheckInterval: check})
	testenv.Run(t, runner.Run)
	testenv.Run(t, stopper.Run)
	testenv.Eventually(t, 5*time.Second, "the stopper to know the registry's epoch", func() bool {
		return stopper.epoch.Load() != 0
	})
	ctx, _ := register(t, runner, "task-1", "user-1")

	// Redis back empty: the record and the epoch are gone.
	for _, key := range []string{runner.taskKey("task-1"), runner.epochKey()} { // two slots on a cluster
		if err := rdb.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		owner, err := stopper.Owner(t.Context(), "task-1")
		if errors.Is(err, ErrNotFound) {
			t.Fatalf("Owner of the running task = %v after %d refusals; want it refused (retryable) until the record is rewritten", err, refused)
		}
		if err == nil {
			if owner != "user-1" {
				t.Fatalf("owner %q", owner)
			}
			break
		}
		if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Owner: %v", err)
		}
		refused++
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := stopper.Cancel(t.Context(), "task-1"); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, ctx, 5*time.Second)
	t.Logf("refused %d times before the record was back", refused)

	// Once the records have had their time, a task that is gone is not
	// found again.
	testenv.Eventually(t, 10*time.Second, "an ended task to be not found", func() bool {
		_, err := stopper.Owner(t.Context(), "no-such-task")
		return errors.Is(err, ErrNotFound)
	})
}
