package testenv

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond until it holds, failing t when timeout passes first.
// It is how a test waits for something another goroutine or instance does:
// the timeout is a bound on a broken run, never a guess at how long the work
// takes. Polls start 10 ms apart and back off to 100 ms, so a cond that
// costs a request does not flood a loaded machine.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := 10 * time.Millisecond; !cond(); pause = min(2*pause, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause)
	}
}

// Together runs fn(0) … fn(n-1) in n goroutines released at the same
// moment, so that what they do races, and returns when all have returned.
func Together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// Run runs a component's Run(ctx) in a goroutine until the test ends, the way
// cmd/ragent runs it. The returned function stops it early and waits for it;
// cleanup does the same. An error other than the context's is a test
// failure, and so is a Run that has not returned 30 s after the cancel.
func Run(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of the cancel")
		}
	})
	t.Cleanup(stop)
	return stop
}
