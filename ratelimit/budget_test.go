package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
)

// budgetInstances starts n limiters named name with budget b on one key
// prefix, each on its own client: n instances of ragent. The window is a
// minute, so nothing refills while a test runs: grants beyond the budget
// wait until a settlement gives tokens back, which makes the tests
// time-free.
func budgetInstances(t *testing.T, n int, b Budget, maxConcurrent int) []*Limiter {
	t.Helper()
	_, prefix := cleanRedis(t)
	var ls []*Limiter
	for range n {
		ls = append(ls, startLimiter(t, testenv.Redis(t), prefix, "llm", Config{
			MaxConcurrent: maxConcurrent, MaxWait: 30 * time.Second, Lease: 10 * time.Second,
			PollInterval: 20 * time.Millisecond, Budget: b, Registerer: prometheus.NewRegistry(),
		}))
	}
	return ls
}

type costResult struct {
	p   *Permit
	err error
}

// acquireCost starts an AcquireCost and returns its waits and its result.
func acquireCost(ctx context.Context, l *Limiter, id, user string, tokens int, retry *Permit) (<-chan Wait, <-chan costResult) {
	waits, done := make(chan Wait, 64), make(chan costResult, 1)
	go func() {
		p, err := l.AcquireCost(ctx, id, user, Class{}, Cost{Tokens: tokens, Retry: retry, OnWait: func(w Wait) {
			select {
			case waits <- w:
			default:
			}
		}})
		done <- costResult{p, err}
	}()
	return waits, done
}

func mustCost(t *testing.T, l *Limiter, id string, tokens int) *Permit {
	t.Helper()
	_, done := acquireCost(t.Context(), l, id, "u-"+id, tokens, nil)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.p
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not granted", id)
		return nil
	}
}

// waitFor reads waits until one satisfies ok (the request reported it).
func waitFor(t *testing.T, waits <-chan Wait, what string, ok func(Wait) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case w := <-waits:
			if ok(w) {
				return
			}
		case <-deadline:
			t.Fatalf("no wait event: %s", what)
		}
	}
}

func granted(t *testing.T, done <-chan costResult, what string) *Permit {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.p
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not granted", what)
		return nil
	}
}

func notGranted(t *testing.T, done <-chan costResult, what string) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("%s: granted (err %v) while the budget had no room", what, r.err)
	default:
	}
}

// TestBudgetTokensAcrossInstances: a token budget is shared by two
// instances; a request over it waits with a free permit, saying it waits for
// the budget, and is granted by the settlement of a call that spent less
// than it reserved.
func TestBudgetTokensAcrossInstances(t *testing.T) {
	ls := budgetInstances(t, 2, Budget{Tokens: 1000, Window: time.Minute}, 10)
	a := mustCost(t, ls[0], "a", 600)
	waits, done := acquireCost(t.Context(), ls[1], "b", "bob", 600, nil)
	waitFor(t, waits, "b waits for the budget", func(w Wait) bool { return w.Budget && w.Position == 1 })
	notGranted(t, done, "b")
	if st, err := ls[1].BudgetStats(t.Context()); err != nil || st.Tokens < 590 || st.Tokens > 600 {
		t.Errorf("budget stats = %+v, %v; want about 600 tokens in use", st, err)
	}
	a.ReleaseUsed(100) // 500 tokens come back
	b := granted(t, done, "b after a's settlement")
	b.ReleaseUsed(600)
	if st, _ := ls[0].BudgetStats(t.Context()); st.Tokens < 690 || st.Tokens > 700 {
		t.Errorf("after settlement %d tokens in use, want about 700 (100 + 600)", st.Tokens)
	}
	assertDrained(t, ls[0].rdb, ls[0].keys)
}

// TestBudgetKeepsOrder: a small request behind a large one that waits for
// the budget does not overtake it, though it alone would fit.
func TestBudgetKeepsOrder(t *testing.T) {
	ls := budgetInstances(t, 2, Budget{Tokens: 1000, Window: time.Minute}, 10)
	big := mustCost(t, ls[0], "big", 900)
	cWaits, cDone := acquireCost(t.Context(), ls[0], "c", "carol", 500, nil)
	waitFor(t, cWaits, "c waits for the budget", func(w Wait) bool { return w.Budget && w.Position == 1 })
	dWaits, dDone := acquireCost(t.Context(), ls[1], "d", "dave", 50, nil)
	waitFor(t, dWaits, "d waits behind c", func(w Wait) bool { return w.Budget && w.Position == 2 })
	notGranted(t, dDone, "d (50 tokens would fit, but c is ahead)")
	big.ReleaseUsed(0)
	granted(t, cDone, "c").Release()
	granted(t, dDone, "d").Release()
}

// TestBudgetRequests: a request budget grants that many, then the next
// waits for the budget; a permit limit still applies beside it.
func TestBudgetRequests(t *testing.T) {
	ls := budgetInstances(t, 2, Budget{Requests: 3, Window: time.Minute}, 10)
	var ps []*Permit
	for i := range 3 {
		ps = append(ps, mustCost(t, ls[i%2], fmt.Sprint("r", i), 0))
	}
	waits, done := acquireCost(t.Context(), ls[1], "r3", "x", 0, nil)
	waitFor(t, waits, "the fourth request waits for the budget", func(w Wait) bool { return w.Budget })
	for _, p := range ps {
		p.Release() // a released request still counts in its window
	}
	notGranted(t, done, "r3")
}

// TestThrottledShrinksEverywhereAndRetryKeepsPlace: a provider refusal
// reported on one instance shrinks the budget the other sees, and the
// refused call, queued again, goes ahead of a request that came after it.
func TestThrottledShrinksEverywhereAndRetryKeepsPlace(t *testing.T) {
	ls := budgetInstances(t, 2, Budget{Tokens: 1000, Window: time.Minute}, 10)
	first := mustCost(t, ls[0], "first", 400)
	laterWaits, laterDone := acquireCost(t.Context(), ls[1], "later", "lena", 400, nil)
	// later fits (800 of 1000)...
	later := granted(t, laterDone, "later")
	_ = laterWaits
	// ...then the provider refuses first's call.
	ls[0].Throttled(t.Context(), first, 0)
	st, err := ls[1].BudgetStats(t.Context())
	if err != nil || st.Scale > 0.6 {
		t.Fatalf("the other instance sees scale %v (err %v), want about 0.5", st.Scale, err)
	}
	if got := metricValue(t, ls[0].bm.throttled); got != 1 {
		t.Errorf("throttled counter = %v", got)
	}
	// A newcomer queues first; the retry of first's call then takes the
	// place first had, ahead of it.
	nWaits, nDone := acquireCost(t.Context(), ls[1], "new", "nina", 10, nil)
	waitFor(t, nWaits, "the newcomer waits for the budget", func(w Wait) bool { return w.Budget && w.Position == 1 })
	rWaits, rDone := acquireCost(t.Context(), ls[0], "first", "u-first", 400, first)
	waitFor(t, rWaits, "the retry is first in line", func(w Wait) bool { return w.Budget && w.Position == 1 })
	waitFor(t, nWaits, "the newcomer moved behind the retry", func(w Wait) bool { return w.Position == 2 })
	notGranted(t, rDone, "retry")
	later.Release()
	// The budget holds 1000 * scale now; nothing refills within the test,
	// so cancel the waiters and check they leave no trace.
	_ = nDone
	_ = rDone
}

// TestBudgetRoundTrips: an uncontended grant of a limiter with a budget
// is one Redis round trip, and its release with the settlement one more.
func TestBudgetRoundTrips(t *testing.T) {
	rdb, prefix := cleanRedis(t)
	hook := &countingHook{}
	rdb.AddHook(hook)
	l := startLimiter(t, rdb, prefix, "llm", Config{MaxConcurrent: 10, Budget: Budget{Requests: 1000, Tokens: 1e6}})
	warm, err := l.AcquireCost(t.Context(), "warm", "u", Class{}, Cost{Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	warm.ReleaseUsed(5) // loads the settle script
	for i := range 20 {
		n0 := hook.n.Load()
		p, err := l.AcquireCost(t.Context(), fmt.Sprint("r", i), "u", Class{}, Cost{Tokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		n1 := hook.n.Load()
		p.ReleaseUsed(50)
		if got := n1 - n0; got != 1 {
			t.Fatalf("grant %d took %d round trips, want 1", i, got)
		}
		if got := hook.n.Load() - n1; got != 1 {
			t.Fatalf("release %d took %d round trips, want 1", i, got)
		}
	}
}

// TestBudgetWindowEdge: a grant stays in the budget's log for its window
// plus 1 % (lua/budget.lua, the window's edge): the provider counts a call
// from when it receives it, a dispatch delay after the grant, so a grant
// whose window has just passed on Redis' clock may still count at the
// provider's. Its log entry is moved back in time (no clock is waited for):
// a window and 1 ms old it still holds the budget's one request; past the
// window and its edge it no longer does.
func TestBudgetWindowEdge(t *testing.T) {
	const window = time.Hour
	ls := budgetInstances(t, 1, Budget{Requests: 1, Window: window}, 10)
	l := ls[0]
	mustCost(t, l, "a", 0).Release() // a released request still counts in its window
	age := func(d time.Duration) {
		now, err := l.rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.rdb.ZAdd(t.Context(), l.keys.budget()+":log", redis.Z{Score: float64(now.Add(-d).UnixMilli()), Member: "a"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	age(window + time.Millisecond)
	waits, done := acquireCost(t.Context(), l, "b", "bob", 0, nil)
	waitFor(t, waits, "b waits: a's grant is a window old but within the edge", func(w Wait) bool { return w.Budget })
	notGranted(t, done, "b")
	age(window + window/100 + time.Millisecond)
	granted(t, done, "b, once a's grant is past the window and its edge").Release()
}
