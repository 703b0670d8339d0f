package ratelimit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// The crash test's child process: it holds permits and queues requests under
// the prefix the parent gives it, says "ready", and waits to be killed.
const helperEnv = "RATELIMIT_TEST_HELPER_PREFIX"

// Timings of the child's limiters; short so the crash test stays fast.
const (
	crashLease   = time.Second
	crashMaxWait = 2 * time.Second
	crashPoll    = 100 * time.Millisecond
)

func crashConfig(n int) Config {
	return Config{MaxConcurrent: n, MaxWait: crashMaxWait, Lease: crashLease, PollInterval: crashPoll}
}

func TestHelperProcess(t *testing.T) {
	prefix := os.Getenv(helperEnv)
	if prefix == "" {
		return // only runs as the crash test's child
	}
	rdb := testenv.Redis(t)
	held := New(rdb, prefix, "held", crashConfig(2))
	queued := New(rdb, prefix, "queued", crashConfig(1))
	ctx := context.Background()
	for i := range 2 {
		if _, err := held.Acquire(ctx, fmt.Sprintf("child-held-%d", i), "child", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := queued.Acquire(ctx, "child-head", "child", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		in := make(chan struct{})
		var once sync.Once
		go queued.Acquire(ctx, fmt.Sprintf("child-queued-%d", i), "child",
			func(int, int) { once.Do(func() { close(in) }) })
		<-in
	}
	fmt.Println("ready")
	select {}
}

// TestCrashedInstanceLeaksNothing SIGKILLs a process that holds permits and
// has queued requests: its permits come back within lease + poll, and its
// queued requests stop blocking the line within max wait + 5 s.
func TestCrashedInstanceLeaksNothing(t *testing.T) {
	t.Parallel()
	rdb, prefix := cleanRedis(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("child exited before it was ready")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child not ready within 10s")
	}

	held := startLimiter(t, testenv.Redis(t), prefix, "held", crashConfig(2))
	queued := startLimiter(t, testenv.Redis(t), prefix, "queued", crashConfig(1))
	ctx := t.Context()
	if n := rdb.ZCard(ctx, held.keys.permits).Val(); n != 2 {
		t.Fatalf("child holds %d permits, want 2", n)
	}
	if n := rdb.ZCard(ctx, queued.keys.queue).Val(); n != 2 {
		t.Fatalf("child queued %d requests, want 2", n)
	}

	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup runs
		t.Fatal(err)
	}
	killed := time.Now()

	var wg sync.WaitGroup
	wg.Go(func() {
		// Both of the child's permits come back within one lease (+ a poll,
		// + slack for a loaded machine).
		var hw sync.WaitGroup
		permits := make([]*Permit, 2)
		for i := range permits {
			hw.Go(func() {
				p, err := held.Acquire(ctx, fmt.Sprintf("parent-held-%d", i), "parent", nil)
				if err != nil {
					t.Errorf("held: %v", err)
					return
				}
				permits[i] = p // both held at once: both child slots are back
			})
		}
		hw.Wait()
		for _, p := range permits {
			if p != nil {
				defer p.Release()
			}
		}
		if d, limit := time.Since(killed), crashLease+crashPoll+500*time.Millisecond; d > limit {
			t.Errorf("child's permits returned after %v, want within %v", d, limit)
		}
	})
	wg.Go(func() {
		// The child's queued zombies block only until their markers expire.
		// The parent queues as the child's user, so the fair order puts it
		// behind them (another user would pass them by: see
		// TestFairShareBetweenUsers).
		qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		l := New(testenv.Redis(t), prefix, "queued", Config{MaxConcurrent: 1, MaxWait: 15 * time.Second,
			Lease: crashLease, PollInterval: crashPoll, Logger: testLogger(t)})
		p, err := l.Acquire(qctx, "parent-queued", "child", nil)
		if err != nil {
			t.Errorf("queued: %v", err)
			return
		}
		p.Release()
		if d, limit := time.Since(killed), crashMaxWait+markerGrace+crashPoll+500*time.Millisecond; d > limit {
			t.Errorf("zombies blocked the queue for %v, want within %v", d, limit)
		}
		t.Logf("zombies cleared %v after the kill", time.Since(killed))
	})
	wg.Wait()
	assertDrained(t, rdb, queued.keys)
	assertDrained(t, rdb, held.keys)
}
