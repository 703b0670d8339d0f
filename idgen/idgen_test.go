package idgen

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests step by hand; sleeping advances it, so waits
// inside Next finish at once and are recorded.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.slept += d
}

func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newFake(t *testing.T, worker int64) (*Generator, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: Epoch.Add(500 * 24 * time.Hour)}
	g := New(worker, Config{Now: clock.now})
	g.sleep = clock.sleep
	return g, clock
}

func mustNext(t *testing.T, g *Generator) int64 {
	t.Helper()
	id, err := g.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return id
}

func TestDecompose(t *testing.T) {
	tests := []struct {
		name   string
		at     time.Time
		worker int64
	}{
		{"epoch", Epoch, 0},
		{"later", Epoch.Add(1234567 * time.Millisecond), 513},
		{"max worker", time.Date(2090, 6, 1, 12, 0, 0, 0, time.UTC), MaxWorkerID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := New(tt.worker, Config{Now: func() time.Time { return tt.at }})
			for wantSeq := range int64(3) {
				at, worker, seq := Decompose(mustNext(t, g))
				if !at.Equal(tt.at) || worker != tt.worker || seq != wantSeq {
					t.Fatalf("Decompose = %s, %d, %d; want %s, %d, %d", at, worker, seq, tt.at, tt.worker, wantSeq)
				}
			}
		})
	}
}

func TestFixedWorkerNeedsNoRedis(t *testing.T) {
	g := New(42, Config{})
	if g.WorkerID() != 42 {
		t.Fatalf("WorkerID = %d, want 42", g.WorkerID())
	}
	prev := int64(0)
	for range 10000 {
		id := mustNext(t, g)
		if id <= prev {
			t.Fatalf("id %d after %d", id, prev)
		}
		if _, w, _ := Decompose(id); w != 42 {
			t.Fatalf("worker %d, want 42", w)
		}
		prev = id
	}
	if err := g.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := g.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

func TestNewRejectsBadWorker(t *testing.T) {
	for _, w := range []int64{-1, MaxWorkerID + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d) did not panic", w)
				}
			}()
			New(w, Config{})
		}()
	}
}

func TestClockSteppedBack(t *testing.T) {
	tests := []struct {
		back    time.Duration
		wantErr bool
	}{
		{1 * time.Millisecond, false},
		{3 * time.Millisecond, false},
		{MaxClockBackwards, false},
		{MaxClockBackwards + time.Millisecond, true},
		{50 * time.Millisecond, true},
		{time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.back.String(), func(t *testing.T) {
			g, clock := newFake(t, 1)
			seen := map[int64]bool{}
			var last int64
			for range 5 {
				last = mustNext(t, g)
				seen[last] = true
			}
			clock.step(-tt.back)

			id, err := g.Next()
			if tt.wantErr {
				if !errors.Is(err, ErrClockBackwards) {
					t.Fatalf("Next = %d, %v; want ErrClockBackwards", id, err)
				}
				// Once the clock has caught up, IDs continue above the old ones.
				clock.step(tt.back)
				id = mustNext(t, g)
			} else {
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				if clock.slept < tt.back {
					t.Errorf("slept %s, want at least %s", clock.slept, tt.back)
				}
			}
			if id <= last || seen[id] {
				t.Fatalf("id %d after %d (duplicate: %v)", id, last, seen[id])
			}
		})
	}
}

func TestSequenceOverflowWaitsForNextMillisecond(t *testing.T) {
	g, clock := newFake(t, 3)
	start := clock.now()
	for want := range int64(maxSeq + 1) {
		at, _, seq := Decompose(mustNext(t, g))
		if !at.Equal(start) || seq != want {
			t.Fatalf("id %d: at %s seq %d; want %s seq %d", want, at, seq, start, want)
		}
	}
	at, _, seq := Decompose(mustNext(t, g))
	if want := start.Add(time.Millisecond); !at.Equal(want) || seq != 0 {
		t.Fatalf("after overflow: at %s seq %d; want %s seq 0", at, seq, want)
	}
	if clock.slept == 0 {
		t.Fatal("overflow did not wait")
	}
}

func TestConcurrentCallersGetUniqueIDs(t *testing.T) {
	g := New(9, Config{})
	const workers, each = 8, 20000
	results := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				id, err := g.Next()
				if err != nil {
					t.Errorf("Next: %v", err)
					return
				}
				results[w] = append(results[w], id)
			}
		})
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*each)
	for _, ids := range results {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate id %d", id)
			}
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("id %d after %d within one goroutine", id, ids[i-1])
			}
			seen[id] = true
		}
	}
}
