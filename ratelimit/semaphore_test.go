package ratelimit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

func startSemaphore(t testing.TB, max int, lease, maxWait time.Duration, prefix string) *Semaphore {
	t.Helper()
	s := NewSemaphore(testenv.Redis(t), prefix, "upload", Config{MaxConcurrent: max, Lease: lease, MaxWait: maxWait,
		PollInterval: 50 * time.Millisecond, Logger: testLogger(t)})
	testenv.Run(t, s.Run)
	waitReady(t, s.n)
	return s
}

func TestSemaphoreCapAcrossInstances(t *testing.T) {
	t.Parallel()
	const max = 3
	_, prefix := cleanRedis(t)
	var sems []*Semaphore
	for range 3 {
		sems = append(sems, startSemaphore(t, max, 5*time.Second, 10*time.Second, prefix))
	}
	var holders, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			p, err := sems[i%3].Acquire(t.Context())
			if err != nil {
				t.Errorf("acquire %d: %v", i, err)
				return
			}
			h := holders.Add(1)
			for m := peak.Load(); h > m && !peak.CompareAndSwap(m, h); m = peak.Load() {
			}
			time.Sleep(2 * time.Millisecond)
			holders.Add(-1)
			p.Release()
		})
	}
	wg.Wait()
	if p := peak.Load(); p > max {
		t.Errorf("peak holders %d > %d", p, max)
	}
	st, err := sems[0].Stats(t.Context())
	if err != nil || st != (Stats{}) {
		t.Errorf("stats after all released = %+v, %v", st, err)
	}
}

func TestSemaphoreTimeoutAndUnavailable(t *testing.T) {
	t.Parallel()
	const maxWait = 500 * time.Millisecond
	_, prefix := cleanRedis(t)
	s := startSemaphore(t, 1, 5*time.Second, maxWait, prefix)
	p, err := s.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.Acquire(t.Context()); !errors.Is(err, ErrTimeout) {
		t.Errorf("err = %v, want ErrTimeout", err)
	}
	// The upper bound only catches a wait that ignores maxWait: a loaded
	// machine (-race, parallel builds) delays the answer by far more than
	// a tight bound allows.
	if d := time.Since(start); d < maxWait || d > maxWait+2*time.Second {
		t.Errorf("timed out after %v, want within [%v, %v]", d, maxWait, maxWait+2*time.Second)
	}
	// A release wakes a waiter well before the next poll.
	got := make(chan time.Duration, 1)
	go func() {
		q, err := s.Acquire(t.Context())
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		got <- 0
		q.Release()
	}()
	testenv.Eventually(t, 5*time.Second, "the waiter to wait", func() bool {
		s.n.mu.Lock()
		defer s.n.mu.Unlock()
		return len(s.n.waiters) == 1
	})
	p.Release()
	select {
	case <-got:
	case <-time.After(time.Second):
		t.Fatal("waiter not granted after release")
	}

	dead := NewSemaphore(deadRedis(t), prefix, "upload", Config{MaxConcurrent: 1, Lease: time.Second, MaxWait: maxWait, Logger: testLogger(t)})
	if _, err := dead.Acquire(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("dead Redis: %v, want ErrUnavailable", err)
	}
}
