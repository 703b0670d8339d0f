package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestChatFairShareBetweenUsers runs three instances with N = 2: a heavy
// user opens five answers (two run, three wait), then a light user asks
// once. The light user is placed first in the queue and admitted at the
// first free slot, before the heavy user's waiting requests, which keep
// their order; the model never sees more than two calls at once. Answers are
// held until the test lets one finish, so one slot frees at a time.
func TestChatFairShareBetweenUsers(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 2, 5, 60*time.Second
	ins := []*instance{start(t, cfg), start(t, cfg), start(t, cfg)}
	admin := ins[0].login(t, "admin", "admin-password")
	ins[0].createUser(t, admin, "light", "light-password", "user")
	light := ins[0].login(t, "light", "light-password")

	var wg sync.WaitGroup
	ask := func(in *instance, token, q string) int {
		return askHeld(t, &wg, llm, q, func(onEvent func(sseEvent) bool) []sseEvent {
			_, events := in.client(t, token).chatStream(context.Background(), map[string]any{"question": q}, onEvent)
			return events
		})
	}
	queueHeavyThenLight(t, 5,
		func(i int, q string) int { return ask(ins[i%3], admin, q) },
		func(q string) int { return ask(ins[2], light, q) })
	// Each finished answer frees one slot; who gets it:
	checkAdmissions(t, &wg, llm, 2, []admission{
		{heavyQ(0), lightQ},
		{heavyQ(1), heavyQ(2)},
		{lightQ, heavyQ(3)},
		{heavyQ(2), heavyQ(4)},
	}, heavyQ(3), heavyQ(4))
}

// heavyQ is the i-th question of a fair-queue test's heavy user, lightQ
// the light user's one.
func heavyQ(i int) string { return fmt.Sprintf("heavy %d #gate", i) }

const lightQ = "light question #gate"

// queueHeavyThenLight, on a queue with N = 2, has the heavy user ask n
// questions (askHeavy: two run, the rest wait in arrival order), then the
// light user ask once (askLight), which must be placed first in the queue,
// ahead of the heavy user's waiting ones.
func queueHeavyThenLight(t *testing.T, n int, askHeavy func(i int, q string) int, askLight func(q string) int) {
	t.Helper()
	for i := range n {
		if pos, want := askHeavy(i, heavyQ(i)), max(0, i-1); pos != want {
			t.Fatalf("%s placed at %d, want %d", heavyQ(i), pos, want)
		}
	}
	if pos := askLight(lightQ); pos != 1 {
		t.Fatalf("the light user's question placed at %d, want 1 (ahead of the heavy user's waiting ones)", pos)
	}
}

// TestChatRunningCapPerUser runs two instances with N = 4 and
// RAGENT_CHAT_MAX_RUNNING_PER_USER = 2, with answers held until the test
// lets them finish. User a holds two slots and queues a third request while
// c holds the other two; b then asks three times: b's first question is told
// position 1 and is served by the first slot that frees, not rejected. Its
// third has the same level as a's queued one and arrived later, yet when b
// is back to one slot it gets the slot b frees, because a is at the cap and
// b is not; a's request gets the next one, once nobody below the cap waits.
func TestChatRunningCapPerUser(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxRunningPerUser, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 4, 2, 3, 60*time.Second
	ins := []*instance{start(t, cfg), start(t, cfg)}
	admin := ins[0].login(t, "admin", "admin-password")
	tokens := map[string]string{"a": admin}
	for u, name := range map[string]string{"b": "bob", "c": "carol"} {
		ins[0].createUser(t, admin, name, name+"-password", "user")
		tokens[u] = ins[0].login(t, name, name+"-password")
	}

	var wg sync.WaitGroup
	ask := func(in *instance, user, q string) int {
		return askHeld(t, &wg, llm, q, func(onEvent func(sseEvent) bool) []sseEvent {
			_, events := in.client(t, tokens[user]).chatStream(context.Background(), map[string]any{"question": q}, onEvent)
			return events
		})
	}
	q := func(user string, i int) string { return fmt.Sprintf("%s %d #gate", user, i) }
	arrivals := []struct {
		user string
		i    int
		want int // 0: started at once, else the first queue position
	}{
		{"a", 1, 0}, {"a", 2, 0}, {"c", 1, 0}, {"c", 2, 0},
		{"a", 3, 1},                           // level 2: a holds two
		{"b", 1, 1}, {"b", 2, 2}, {"b", 3, 3}, // levels 0, 1, 2: a 3 is ahead of b 3 but yields to it
	}
	for n, a := range arrivals {
		if pos := ask(ins[n%2], a.user, q(a.user, a.i)); pos != a.want {
			t.Fatalf("%s placed at %d, want %d", q(a.user, a.i), pos, a.want)
		}
	}
	checkAdmissions(t, &wg, llm, 4, []admission{
		{q("c", 1), q("b", 1)}, // the newcomer, at position 1, gets the first free slot
		{q("c", 2), q("b", 2)},
		{q("b", 1), q("b", 3)}, // a holds its cap, b one slot: b's later request goes first
		{q("b", 2), q("a", 3)}, // nobody below the cap waits: a gets its third slot
	}, q("a", 1), q("a", 2), q("a", 3), q("b", 3))
}

// admission is one step of a held queue: once finish's answer ends, the
// slot it frees goes to admitted.
type admission struct{ finish, admitted string }

// checkAdmissions lets each step's answer end in turn and fails unless the
// step's admitted question is the next to start; then it lets the rest
// end, waits for every stream in wg, and fails if the model ever saw more
// than limit calls at once.
func checkAdmissions(t *testing.T, wg *sync.WaitGroup, llm *fakeLLM, limit int32, steps []admission, rest ...string) {
	t.Helper()
	for _, s := range steps {
		llm.open(s.finish)
		if got := llm.nextStart(t); got != s.admitted {
			t.Fatalf("after %q finished, %q was admitted, want %q", s.finish, got, s.admitted)
		}
	}
	for _, q := range rest {
		llm.open(q)
	}
	wg.Wait()
	if m := llm.maxCalls.Load(); m > limit {
		t.Fatalf("%d model calls at once, limit %d", m, limit)
	}
}

// askHeld sends question q with send, in wg, to a chat whose answers llm
// holds, and returns the position of its first queue event, or 0 once its
// answer started. The stream must end answered, never rejected.
func askHeld(t *testing.T, wg *sync.WaitGroup, llm *fakeLLM, q string, send func(onEvent func(sseEvent) bool) []sseEvent) int {
	t.Helper()
	queued := make(chan int, 1)
	var once sync.Once
	wg.Go(func() {
		events := send(func(e sseEvent) bool {
			if e.Name == "queue" {
				pos, _ := e.json(t)["position"].(float64)
				once.Do(func() { queued <- int(pos) })
			}
			return true
		})
		if got := collapse(events); got != "meta sources message finish done" && got != "meta queue sources message finish done" {
			t.Errorf("%s: sequence %q", q, got)
		}
	})
	select {
	case pos := <-queued:
		return pos
	case got := <-llm.started:
		if got != q {
			t.Fatalf("answer %q started, want %q", got, q)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: neither queued nor started within 30 s", q)
		return -1
	}
}
