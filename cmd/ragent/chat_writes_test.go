package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// conversationCount is how many conversations the client's user has.
func conversationCount(t testing.TB, c *client) int {
	t.Helper()
	var list struct{ Items []struct{ ID string } }
	c.do("GET", "/api/v1/conversations?limit=100", nil).json(t, &list)
	return len(list.Items)
}

type savedMessage struct{ ID, Role, Content, Status string }

func conversationMessages(t testing.TB, c *client, convID string) []savedMessage {
	t.Helper()
	var msgs struct{ Messages []savedMessage }
	c.do("GET", "/api/v1/conversations/"+convID+"/messages", nil).json(t, &msgs)
	return msgs.Messages
}

// TestChatRateLimitPerUser: a user over RAGENT_CHAT_RATE_PER_MINUTE gets
// 429 with Retry-After before anything is written, on every instance; other
// users are not affected.
func TestChatRateLimitPerUser(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatRatePerMinute = 3
	ins := []*instance{start(t, cfg), start(t, cfg)}
	admin := ins[0].login(t, "admin", "admin-password")
	ins[0].createUser(t, admin, "alice", "alice-password", "user")
	ins[0].createUser(t, admin, "bob", "bob-password", "user")
	alice := ins[0].login(t, "alice", "alice-password")

	for i := range 3 {
		status, events := ins[i%2].client(t, alice).chatStream(context.Background(),
			map[string]any{"question": fmt.Sprintf("allowed question %d", i)}, nil)
		if status != http.StatusOK || collapse(events) != "meta sources message finish done" {
			t.Fatalf("chat %d within the rate: %d %q", i, status, collapse(events))
		}
	}
	before := llm.streams.Load()
	for i, in := range ins {
		r := in.client(t, alice).do("POST", "/api/v1/chat", map[string]any{"question": fmt.Sprintf("one too many %d", i)})
		if r.Status != http.StatusTooManyRequests || r.errorCode(t) != "busy" {
			t.Fatalf("instance %d, chat over the rate: %d %s", i, r.Status, r.Body)
		}
		// 3 per minute: the next one fits about 20 s after the first.
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
			t.Fatalf("Retry-After %q, want 1..60 seconds", r.Header.Get("Retry-After"))
		}
	}
	if n := conversationCount(t, ins[1].client(t, alice)); n != 3 {
		t.Errorf("alice has %d conversations, want 3 (refused chats write nothing)", n)
	}
	if llm.streams.Load() != before {
		t.Error("a refused chat reached the model")
	}
	bob := ins[1].login(t, "bob", "bob-password")
	if status, _ := ins[1].client(t, bob).chatStream(context.Background(), map[string]any{"question": "bob's turn"}, nil); status != http.StatusOK {
		t.Errorf("another user refused: %d", status)
	}
}

// TestChatRejectedTurnsWriteNothing: 50 chats that the queue turns away
// (busy) as new conversations leave no conversation and no message behind;
// a rejected turn in an existing conversation stores only its question,
// marked rejected.
func TestChatRejectedTurnsWriteNothing(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxWait = 1, 300*time.Millisecond
	ins := []*instance{start(t, cfg), start(t, cfg)}
	admin := ins[0].login(t, "admin", "admin-password")
	ins[0].createUser(t, admin, "bob", "bob-password", "user")
	bobToken := ins[0].login(t, "bob", "bob-password")
	bob := ins[0].client(t, bobToken)

	// Bob's existing conversation, answered before the queue fills.
	_, events := bob.chatStream(context.Background(), map[string]any{"question": "first question"}, nil)
	convID, _ := events[0].json(t)["conversationId"].(string)
	if len(conversationMessages(t, bob, convID)) != 2 {
		t.Fatal("the answered turn was not saved")
	}

	// The admin holds the only slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holding := make(chan struct{})
	var once sync.Once
	go ins[0].client(t, admin).chatStream(ctx, map[string]any{"question": "holder #slow"}, func(e sseEvent) bool {
		if e.Name == "message" {
			once.Do(func() { close(holding) })
		}
		return true
	})
	<-holding

	const rejected = 50
	var wg sync.WaitGroup
	for i := range rejected {
		wg.Go(func() {
			status, events := ins[i%2].client(t, bobToken).chatStream(context.Background(),
				map[string]any{"question": fmt.Sprintf("refused question %d", i)}, nil)
			if status != http.StatusOK || len(events) < 3 {
				t.Errorf("refused chat %d: %d %q", i, status, collapse(events))
				return
			}
			if got := collapse(events); got != "meta queue reject finish done" && got != "meta reject finish done" {
				t.Errorf("refused chat %d: sequence %q", i, got)
			}
			if f := events[len(events)-2].json(t); f["status"] != "rejected" || f["saved"] != false {
				t.Errorf("refused chat %d: finish %v", i, f)
			}
		})
	}
	wg.Wait()
	if n := conversationCount(t, bob); n != 1 {
		t.Errorf("bob has %d conversations after %d rejected new ones, want 1", n, rejected)
	}

	// Rejected in the existing conversation: the question only.
	_, events = ins[1].client(t, bobToken).chatStream(context.Background(),
		map[string]any{"question": "refused follow-up", "conversationId": convID}, nil)
	if f := events[len(events)-2].json(t); f["status"] != "rejected" || f["saved"] != nil {
		t.Fatalf("refused follow-up: finish %v", f)
	}
	msgs := conversationMessages(t, bob, convID)
	if len(msgs) != 3 || msgs[2].Role != "user" || msgs[2].Content != "refused follow-up" || msgs[2].Status != "rejected" {
		t.Fatalf("existing conversation after a rejected follow-up: %+v", msgs)
	}
}
