package ingest

import "testing"

// TestWake checks the relay's and the fetcher's signal: it never blocks,
// and signals sent while one is pending wake the loop once.
func TestWake(t *testing.T) {
	ch := make(chan struct{}, 1)
	wake(ch)
	wake(ch) // one is pending: this one must not block
	select {
	case <-ch:
	default:
		t.Fatal("wake sent no signal")
	}
	select {
	case <-ch:
		t.Fatal("two signals pending after two wakes; want one")
	default:
	}
}
