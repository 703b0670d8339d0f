package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// chatEvents resumes a task's stream after lastID ("" for none), sent as
// the Last-Event-ID header or, with viaQuery, the lastEventId parameter.
func (c *client) chatEvents(ctx context.Context, taskID, lastID string, viaQuery bool, onEvent func(sseEvent) bool) (status int, events []sseEvent, body string) {
	c.t.Helper()
	path := "/api/v1/chat/tasks/" + taskID + "/events"
	if viaQuery && lastID != "" {
		path += "?lastEventId=" + lastID
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if !viaQuery && lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return streamRequest(c.t, req, onEvent)
}

// resumeSeed is the seed of the random drop points, logged so a failure can
// be replayed with RAGENT_TEST_RESUME_SEED.
func resumeSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RAGENT_TEST_RESUME_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("RAGENT_TEST_RESUME_SEED: %v", err)
		}
	}
	t.Logf("drop points from seed %d (RAGENT_TEST_RESUME_SEED=%d replays them)", seed, seed)
	return seed
}

// Across three instances: a client reads some events from one, drops, and
// resumes on another with Last-Event-ID; it gets every later event exactly
// once, in order, ending in done, and the answer, which ran on meanwhile,
// is whole and saved. 20 runs with random drop points (the first at 5) and
// random instances.
func TestChatResumeAcrossInstances(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	ins := []*instance{start(t, cfg), start(t, cfg), start(t, cfg)}
	token := ins[0].login(t, "admin", "admin-password")
	seedKnowledge(t, ins[0], token)
	clients := make([]*client, len(ins))
	for i, in := range ins {
		clients[i] = in.client(t, token)
	}
	rng := rand.New(rand.NewPCG(resumeSeed(t), 0))
	const total = 44 // meta, sources, 40 message, finish, done
	for run := range 20 {
		from := rng.IntN(len(ins))
		to := (from + 1 + rng.IntN(len(ins)-1)) % len(ins)
		drop := 5
		if run > 0 {
			drop = 1 + rng.IntN(total-1)
		}
		viaQuery := run%2 == 1
		q := fmt.Sprintf("run %d #medium", run)

		ctx, cancel := context.WithCancel(context.Background())
		_, first := clients[from].chatStream(ctx, map[string]any{"question": q}, func(sseEvent) bool {
			drop--
			return drop > 0
		})
		cancel()
		if len(first) == 0 || first[0].Name != "meta" {
			t.Fatalf("run %d: first stream %v", run, first)
		}
		meta := first[0].json(t)
		last := first[len(first)-1].ID
		status, rest, body := clients[to].chatEvents(context.Background(), meta["taskId"].(string), last, viaQuery, nil)
		if status != http.StatusOK {
			t.Fatalf("run %d: resume on instance %d after %s: %d %s", run, to, last, status, body)
		}
		all := append(first, rest...)
		for i, e := range all {
			if e.ID != strconv.Itoa(i+1) {
				t.Fatalf("run %d (instance %d → %d, dropped after %d): event %d has id %q: %v", run, from, to, len(first), i, e.ID, all)
			}
		}
		if got := collapse(all); got != "meta sources message finish done" || len(all) != total {
			t.Fatalf("run %d: %d events %q", run, len(all), got)
		}
		var answer strings.Builder
		for _, e := range all {
			if e.Name == "message" {
				answer.WriteString(e.json(t)["delta"].(string))
			}
		}
		if f := all[total-2].json(t); f["status"] != "completed" {
			t.Fatalf("run %d: finish %v", run, f)
		}
		if !strings.HasPrefix(answer.String(), "part0 part1 ") || !strings.HasSuffix(answer.String(), "part39 ") {
			t.Fatalf("run %d: answer %q", run, answer.String())
		}
		if run == 0 {
			waitMessageStatus(t, clients[to], meta["conversationId"].(string), "completed")
		}
	}
}

// A client that goes away does not stop the answer: it runs on, is saved
// whole, and releases its LLM slot; with a short detached timeout it is
// stopped that long after the disconnect, as "disconnect". A stop from
// another instance still stops a detached answer.
func TestChatDetachedAnswer(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent = 1
	a, b := start(t, cfg), start(t, cfg)
	token := a.login(t, "admin", "admin-password")
	onA, onB := a.client(t, token), b.client(t, token)

	t.Run("runs on and is saved", func(t *testing.T) {
		q := "detached #medium"
		events := dropAfterMessage(t, onA, q)
		meta := events[0].json(t)
		waitMessageStatus(t, onA, meta["conversationId"].(string), "completed")
		if _, abandoned := llm.abandonedAt(q); abandoned {
			t.Fatal("the upstream answer was abandoned after the client left")
		}
		// The permit was released: the one slot serves the next chat.
		_, next := onB.chatStream(context.Background(), map[string]any{"question": "next"}, nil)
		if got := collapse(next); got != "meta sources message finish done" {
			t.Fatalf("next chat %q", got)
		}
	})

	t.Run("stopped from another instance", func(t *testing.T) {
		q := "detached stop #slow"
		events := dropAfterMessage(t, onA, q)
		meta := events[0].json(t)
		if r := onB.do("POST", "/api/v1/chat/tasks/"+meta["taskId"].(string)+"/stop", nil); r.Status != http.StatusOK {
			t.Fatalf("stop: %d %s", r.Status, r.Body)
		}
		testenv.Eventually(t, 5*time.Second, "the upstream answer to be abandoned", func() bool {
			_, ok := llm.abandonedAt(q)
			return ok
		})
		waitMessageStatus(t, onA, meta["conversationId"].(string), "cancelled")
		status, rest, body := onB.chatEvents(context.Background(), meta["taskId"].(string), events[len(events)-1].ID, false, nil)
		if status != http.StatusOK || collapse(rest) != "message cancel finish done" && collapse(rest) != "cancel finish done" {
			t.Fatalf("resumed after the stop: %d %q %s", status, collapse(rest), body)
		}
		if c := rest[len(rest)-3].json(t); c["reason"] != "user" {
			t.Fatalf("cancel %v", c)
		}
	})

	t.Run("stopped after the detached timeout", func(t *testing.T) {
		cfg := chatConfig(t, llm)
		cfg.ChatDetachedTimeout = 500 * time.Millisecond
		c := start(t, cfg).adminClient(t)
		q := "detached timeout #slow"
		left := time.Now()
		events := dropAfterMessage(t, c, q)
		var at time.Time
		testenv.Eventually(t, 5*time.Second, "the upstream answer to be abandoned", func() bool {
			var ok bool
			at, ok = llm.abandonedAt(q)
			return ok
		})
		if d := at.Sub(left); d < cfg.ChatDetachedTimeout {
			t.Fatalf("abandoned %v after the disconnect, before the detached timeout %v", d, cfg.ChatDetachedTimeout)
		}
		meta := events[0].json(t)
		waitMessageStatus(t, c, meta["conversationId"].(string), "cancelled")
		_, rest, _ := c.chatEvents(context.Background(), meta["taskId"].(string), "", false, nil)
		for _, e := range rest {
			if e.Name == "cancel" && e.json(t)["reason"] != "disconnect" {
				t.Fatalf("cancel %s, want reason disconnect", e.Data)
			}
		}
		if got := collapse(rest); !strings.HasSuffix(got, "cancel finish done") {
			t.Fatalf("replay %q", got)
		}
	})
}

// dropAfterMessage posts q and disconnects at its first message event.
func dropAfterMessage(t *testing.T, c *client, q string) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, events := c.chatStream(ctx, map[string]any{"question": q}, func(e sseEvent) bool { return e.Name != "message" })
	if len(events) == 0 || events[0].Name != "meta" || events[len(events)-1].Name != "message" {
		t.Fatalf("%q: stream %v", q, events)
	}
	return events
}

// Only the task's owner resumes it, through a session or a key that
// reaches the turn's knowledge bases; bad ids are refused before any
// stream starts.
func TestChatResumeAccess(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	kbA := admin.createKB("kb-a")
	admin.waitReady(admin.uploadAccepted(kbA, "a.md", []byte("# A\n\nThe walrus lives in knowledge base A.\n")).ID)
	in.createUser(t, admin.token, "bob", "bob-password", "user")
	bob := in.client(t, in.login(t, "bob", "bob-password"))
	limited := in.client(t, createKey(t, admin, map[string]any{"name": "a only", "scopes": []string{"chat"}, "knowledgeBaseIds": []string{kbA}}).Key)
	searchOnly := in.client(t, createKey(t, admin, map[string]any{"name": "search", "scopes": []string{"search"}}).Key)

	task := func(c *client, body map[string]any) string {
		t.Helper()
		_, events := c.chatStream(context.Background(), body, nil)
		if collapse(events) != "meta sources message finish done" {
			t.Fatalf("chat %v: %q", body, collapse(events))
		}
		return events[0].json(t)["taskId"].(string)
	}
	anyKB := task(admin, map[string]any{"question": "walrus?"})
	onlyA := task(admin, map[string]any{"question": "walrus?", "knowledgeBaseIds": []string{kbA}})
	byKey := task(limited, map[string]any{"question": "walrus?"})

	for _, tc := range []struct {
		name   string
		c      *client
		task   string
		lastID string
		want   int
	}{
		{"owner", admin, anyKB, "2", http.StatusOK},
		{"another user", bob, anyKB, "", http.StatusNotFound},
		{"limited key, turn over any knowledge base", limited, anyKB, "", http.StatusNotFound},
		{"limited key, turn within its knowledge bases", limited, onlyA, "", http.StatusOK},
		{"limited key, its own turn", limited, byKey, "", http.StatusOK},
		{"key without the chat scope", searchOnly, anyKB, "", http.StatusForbidden},
		{"unknown task", admin, "123456789", "", http.StatusNotFound},
		{"bad Last-Event-ID", admin, anyKB, "x", http.StatusBadRequest},
		{"negative Last-Event-ID", admin, anyKB, "-1", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, events, body := tc.c.forTest(t).chatEvents(context.Background(), tc.task, tc.lastID, false, nil)
			if status != tc.want {
				t.Fatalf("status %d %s, want %d", status, body, tc.want)
			}
			if status == http.StatusOK && (len(events) == 0 || events[len(events)-1].Name != "done") {
				t.Fatalf("events %v", events)
			}
			if tc.lastID == "2" && events[0].ID != "3" {
				t.Fatalf("first replayed id %q after 2", events[0].ID)
			}
		})
	}
}
