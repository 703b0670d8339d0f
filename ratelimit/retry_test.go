package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragent-go/ragent/internal/testenv"
)

// acquireClassCost is acquireCost for a request of class c.
func acquireClassCost(ctx context.Context, l *Limiter, id, user string, c Class, tokens int, retry *Permit) (<-chan Wait, <-chan costResult) {
	waits, done := make(chan Wait, 64), make(chan costResult, 1)
	go func() {
		p, err := l.AcquireCost(ctx, id, user, c, Cost{Tokens: tokens, Retry: retry, OnWait: func(w Wait) {
			select {
			case waits <- w:
			default:
			}
		}})
		done <- costResult{p, err}
	}()
	return waits, done
}

// TestRetryKeepsPlaceWithoutBudget: on a limiter without a budget, a call
// the provider refused, queued again with Cost.Retry, goes ahead of a
// request that came after its first try, across two instances.
func TestRetryKeepsPlaceWithoutBudget(t *testing.T) {
	_, prefix := cleanRedis(t)
	var ls []*Limiter
	for range 2 {
		ls = append(ls, startLimiter(t, testenv.Redis(t), prefix, "embed", Config{
			MaxConcurrent: 1, MaxWait: 30 * time.Second, Lease: 10 * time.Second,
			PollInterval: 20 * time.Millisecond, Registerer: prometheus.NewRegistry(),
		}))
	}
	first := mustCost(t, ls[0], "first", 0)
	laterWaits, laterDone := acquireCost(t.Context(), ls[1], "later", "lena", 0, nil)
	waitFor(t, laterWaits, "later waits behind first", func(w Wait) bool { return w.Position == 1 })
	// The provider refuses first's call: its permit goes to later.
	ls[0].Throttled(t.Context(), first, 0)
	later := granted(t, laterDone, "later")
	// A newcomer queues; the retry of first's call then takes first's
	// place, ahead of it.
	nWaits, nDone := acquireCost(t.Context(), ls[1], "new", "nina", 0, nil)
	waitFor(t, nWaits, "the newcomer waits", func(w Wait) bool { return w.Position == 1 })
	rWaits, rDone := acquireCost(t.Context(), ls[0], "first-retry", "u-first", 0, first)
	waitFor(t, rWaits, "the retry is first in line", func(w Wait) bool { return w.Position == 1 })
	waitFor(t, nWaits, "the newcomer moved behind the retry", func(w Wait) bool { return w.Position == 2 })
	later.Release()
	granted(t, rDone, "the retry").Release()
	granted(t, nDone, "the newcomer").Release()
	assertDrained(t, ls[0].rdb, ls[0].keys)
}

// TestBudgetReserveKeepsRoomForQuestions: a class with a budget reserve
// (document batches) spends the whole budget while no request without one
// (a question) came within the window; once one did, it fits only within
// the rest, and a question still finds the reserve free.
func TestBudgetReserveKeepsRoomForQuestions(t *testing.T) {
	ls := budgetInstances(t, 2, Budget{Tokens: 1000, Window: time.Minute}, 10)
	docs := Class{Level: 512, BudgetReserve: 0.2}
	// No question yet: a batch may take 900 of 1000.
	_, d1Done := acquireClassCost(t.Context(), ls[0], "doc1", "documents:a", docs, 900, nil)
	d1 := granted(t, d1Done, "doc1, with no question within the window")
	q1 := mustCost(t, ls[1], "q1", 50) // 950
	// A question came: batches fit within 800, so a batch of 30 waits
	// though 980 of 1000 would fit...
	d2Waits, d2Done := acquireClassCost(t.Context(), ls[1], "doc2", "documents:b", docs, 30, nil)
	waitFor(t, d2Waits, "doc2 waits for the budget", func(w Wait) bool { return w.Budget })
	// ...and the next question fits in the reserve (990 of 1000).
	granted(t, func() <-chan costResult { _, d := acquireCost(t.Context(), ls[0], "q2", "quinn", 40, nil); return d }(), "q2").Release()
	notGranted(t, d2Done, "doc2")
	// Settlements give tokens back: doc1 spent 100, so doc2 fits.
	d1.ReleaseUsed(100)
	granted(t, d2Done, "doc2 after the settlement").Release()
	q1.Release()
}
