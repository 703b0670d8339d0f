package ingest

import (
	"context"
	"sync"

	"github.com/ragent-go/ragent/service"
)

// workSlots are an instance's WorkConcurrency places where documents are
// parsed, chunked and embedded (where ingestion waits for the embedding
// gate and its budget). A freed place goes to the waiting document whose
// knowledge base has the fewest documents in hand (holding a place here),
// the longest waiting among equals, so a knowledge base with many
// documents delivered to this instance does not take every place from one
// with few (docs/ingestion.md "Fair shares").
type workSlots struct {
	mu      sync.Mutex
	free    int
	held    map[service.ID]int
	waiting []*slotWaiter // in arrival order
}

type slotWaiter struct {
	kb      service.ID
	granted chan struct{} // closed when the place is the waiter's
}

func newWorkSlots(n int) *workSlots {
	return &workSlots{free: n, held: map[service.ID]int{}}
}

// acquire waits for a place for a document of kb and returns its release.
func (w *workSlots) acquire(ctx context.Context, kb service.ID) (func(), error) {
	w.mu.Lock()
	if w.free > 0 && len(w.waiting) == 0 {
		w.free--
		w.held[kb]++
		w.mu.Unlock()
		return func() { w.release(kb) }, nil
	}
	me := &slotWaiter{kb: kb, granted: make(chan struct{})}
	w.waiting = append(w.waiting, me)
	w.mu.Unlock()
	select {
	case <-me.granted:
		return func() { w.release(kb) }, nil
	case <-ctx.Done():
		w.mu.Lock()
		select {
		case <-me.granted:
			// Granted as ctx ended: hand the place on.
			w.mu.Unlock()
			w.release(kb)
		default:
			w.remove(me)
			w.mu.Unlock()
		}
		return nil, ctx.Err()
	}
}

// release frees kb's place and grants it to the fairest waiter.
func (w *workSlots) release(kb service.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[kb]--; w.held[kb] <= 0 {
		delete(w.held, kb)
	}
	if len(w.waiting) == 0 {
		w.free++
		return
	}
	next := w.waiting[0]
	for _, c := range w.waiting[1:] {
		if w.held[c.kb] < w.held[next.kb] {
			next = c
		}
	}
	w.remove(next)
	w.held[next.kb]++
	close(next.granted)
}

func (w *workSlots) remove(me *slotWaiter) {
	for i, c := range w.waiting {
		if c == me {
			w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
			return
		}
	}
}
