package ingest

import (
	"context"
	"runtime"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// TestWorkSlotsGoToFewestInHand: with every place held by knowledge base
// A and two of A's documents waiting before one of B's, the first freed
// place goes to B's document (A holds one, B none), the next to A's
// longest waiting (both hold one).
func TestWorkSlotsGoToFewestInHand(t *testing.T) {
	const a, b = service.ID(1), service.ID(2)
	w := newWorkSlots(2)
	ctx := context.Background()
	var held []func()
	for range 2 {
		release, err := w.acquire(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	got := make(chan string, 3)
	for i, waiter := range []struct {
		kb   service.ID
		name string
	}{{a, "a1"}, {a, "a2"}, {b, "b1"}} {
		go func() {
			if _, err := w.acquire(ctx, waiter.kb); err != nil {
				t.Error(err)
				return
			}
			got <- waiter.name
		}()
		waitQueued(w, i+1) // arrival order is the test's
	}
	held[0]()
	if g := <-got; g != "b1" {
		t.Fatalf("the first freed place went to %s, want b1", g)
	}
	held[1]()
	if g := <-got; g != "a1" {
		t.Fatalf("the second freed place went to %s, want a1", g)
	}
}

// TestWorkSlotsCancelled: a waiter whose context ends leaves the queue,
// and the place freed later is free again.
func TestWorkSlotsCancelled(t *testing.T) {
	w := newWorkSlots(1)
	release, err := w.acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := w.acquire(ctx, 2); done <- err }()
	waitQueued(w, 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait got a place")
	}
	release()
	if w.free != 1 || len(w.waiting) != 0 || len(w.held) != 0 {
		t.Fatalf("after release: free %d, waiting %d, held %v; want 1, 0, none", w.free, len(w.waiting), w.held)
	}
}

// waitQueued returns once n documents wait for a place.
func waitQueued(w *workSlots, n int) {
	for {
		w.mu.Lock()
		queued := len(w.waiting)
		w.mu.Unlock()
		if queued >= n {
			return
		}
		runtime.Gosched()
	}
}
