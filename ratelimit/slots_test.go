package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// Every script of the package runs here through a client of testenv.Redis,
// which checks when the test ends that each call kept its keys in one Redis
// Cluster slot (CLUSTER KEYSLOT on the test cluster); on the cluster pass
// the server refuses a cross-slot call besides.
func TestScriptsKeepKeysInOneSlot(t *testing.T) {
	rdb, prefix := cleanRedis(t)
	ctx := t.Context()
	l := startLimiter(t, rdb, prefix, "slots", Config{MaxConcurrent: 1, MaxWait: 10 * time.Second,
		Lease: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond})

	held := mustAcquire(t, l, "first", "u") // enqueue, granted
	testenv.Eventually(t, 10*time.Second, "the permit renewed", func() bool {
		return testenv.ScriptRan(rdb, renewScript.Hash())
	})
	waiting := acquireQueued(ctx, l, "second", "v") // enqueue, waiting
	leaveCtx, cancel := context.WithCancel(ctx)
	leaving := acquireQueued(leaveCtx, l, "third", "w")
	cancel() // leave
	if r := <-leaving; r.err == nil {
		t.Fatal("a cancelled acquire got a permit")
	}
	if _, err := l.Stats(ctx); err != nil { // stats
		t.Fatal(err)
	}
	held.Release() // release; the waiter claims
	if r := <-waiting; r.err != nil {
		t.Fatal(r.err)
	} else {
		r.p.Release()
	}

	s := NewSemaphore(rdb, prefix, "slots", Config{MaxConcurrent: 1})
	p, err := s.Acquire(ctx) // try
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if _, _, err := NewRate(rdb, prefix, "slots", 10, time.Minute).Allow(ctx, "u"); err != nil { // rate
		t.Fatal(err)
	}
	if err := NewPause(rdb, prefix, "slots").Extend(ctx, time.Second); err != nil { // pause
		t.Fatal(err)
	}

	startLimiter(t, rdb, prefix, "slots-local", Config{OnRedisError: PolicyLocal, NoPubSub: true}) // presence
	testenv.Eventually(t, 10*time.Second, "the local-policy instance counted itself", func() bool {
		return testenv.ScriptRan(rdb, presenceScript.Hash())
	})

	for name, s := range map[string]*redis.Script{
		"enqueue": enqueueScript, "claim": claimScript, "leave": leaveScript, "release": releaseScript,
		"renew": renewScript, "try": tryScript, "stats": statsScript, "rate": rateScript, "pause": pauseScript,
		"presence": presenceScript,
	} {
		if !testenv.ScriptRan(rdb, s.Hash()) {
			t.Errorf("%s.lua did not run", name)
		}
	}
}
