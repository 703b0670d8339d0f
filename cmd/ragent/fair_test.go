package main

import (
	"context"
	"fmt"
	"slices"
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
	// ask sends a question and returns the position of its first queue
	// event, or 0 once its answer started.
	ask := func(in *instance, token, q string) int {
		queued := make(chan int, 1)
		var once sync.Once
		wg.Go(func() {
			_, events := in.client(t, token).chatStream(context.Background(), map[string]any{"question": q}, func(e sseEvent) bool {
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
	heavy := func(i int) string { return fmt.Sprintf("heavy %d #gate", i) }
	const lightQ = "light question #gate"
	for i := range 5 {
		want := max(0, i-1) // two run at once, three wait in arrival order
		if pos := ask(ins[i%3], admin, heavy(i)); pos != want {
			t.Fatalf("%s placed at %d, want %d", heavy(i), pos, want)
		}
	}
	if pos := ask(ins[2], light, lightQ); pos != 1 {
		t.Fatalf("the light user's question placed at %d, want 1 (ahead of the heavy user's waiting ones)", pos)
	}
	// Each finished answer frees one slot; who gets it:
	steps := []struct{ finish, admitted string }{
		{heavy(0), lightQ},
		{heavy(1), heavy(2)},
		{lightQ, heavy(3)},
		{heavy(2), heavy(4)},
	}
	var order []string
	for _, s := range steps {
		llm.open(s.finish)
		got := llm.nextStart(t)
		order = append(order, got)
		if got != s.admitted {
			t.Fatalf("after %q finished, %q was admitted, want %q", s.finish, got, s.admitted)
		}
	}
	llm.open(heavy(3))
	llm.open(heavy(4))
	wg.Wait()
	if m := llm.maxCalls.Load(); m > 2 {
		t.Fatalf("%d model calls at once, limit 2", m)
	}
	if !slices.Equal(order, []string{lightQ, heavy(2), heavy(3), heavy(4)}) {
		t.Fatalf("admission order %q", order)
	}
}
