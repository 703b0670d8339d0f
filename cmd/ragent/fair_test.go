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
// user opens five long answers (two run, three wait), then a light user
// asks once. The light user is placed first in the queue and its answer
// starts before the heavy user's waiting ones; the model never runs more
// than two answers.
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
	// event (0 when it started at once) as soon as it has its place.
	ask := func(in *instance, token, q string) int {
		placed := make(chan int, 1)
		var once sync.Once
		wg.Go(func() {
			defer once.Do(func() { placed <- -1 })
			_, events := in.client(t, token).chatStream(context.Background(), map[string]any{"question": q}, func(e sseEvent) bool {
				switch e.Name {
				case "queue":
					pos, _ := e.json(t)["position"].(float64)
					once.Do(func() { placed <- int(pos) })
				case "sources":
					once.Do(func() { placed <- 0 })
				}
				return true
			})
			if got := collapse(events); got != "meta sources message finish done" && got != "meta queue sources message finish done" {
				t.Errorf("%s: sequence %q", q, got)
			}
		})
		return <-placed
	}
	for i := range 5 {
		want := max(0, i-1) // two run at once, three wait in arrival order
		if pos := ask(ins[i%3], admin, fmt.Sprintf("heavy %d #slow", i)); pos != want {
			t.Fatalf("heavy %d placed at %d, want %d", i, pos, want)
		}
	}
	if pos := ask(ins[2], light, "light question #slow"); pos != 1 {
		t.Fatalf("the light user's question placed at %d, want 1 (ahead of the heavy user's waiting ones)", pos)
	}
	wg.Wait()

	want := []string{"heavy 0 #slow", "heavy 1 #slow", "light question #slow", "heavy 2 #slow", "heavy 3 #slow", "heavy 4 #slow"}
	if got := llm.startOrder(); !slices.Equal(got, want) {
		t.Fatalf("answers started in order\n got %q\nwant %q", got, want)
	}
	if m := llm.maxCalls.Load(); m > 2 {
		t.Fatalf("%d model calls at once, limit 2", m)
	}
}
