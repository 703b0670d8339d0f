package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// chatConfig is a test configuration whose answer model is the fake LLM.
func chatConfig(t testing.TB, llm *fakeLLM) Config {
	cfg := testConfig(t)
	cfg.LLMProvider, cfg.LLMBaseURL, cfg.LLMChatModel, cfg.LLMFastModel = "openai", llm.URL(), "test-model", "test-fast"
	return cfg
}

// seedKnowledge creates a knowledge base with one ready document.
func seedKnowledge(t testing.TB, in *instance, admin string) string {
	t.Helper()
	c := in.client(t, admin)
	kb := c.createKB("kb-" + t.Name())
	doc := c.uploadAccepted(kb, "vpn.md", []byte("# VPN\n\nTo connect to the VPN install the GlobalProtect client and sign in with your employee id.\n"))
	c.waitReady(doc.ID)
	return kb
}

func TestChatCompletedStream(t *testing.T) {
	llm := newFakeLLM(t)
	llm.garbageJSON.Store(true) // intent scoring answers garbage: the chat must not fail
	in := start(t, chatConfig(t, llm))
	admin := in.login(t, "admin", "admin-password")
	seedKnowledge(t, in, admin)
	c := in.client(t, admin)

	status, events := c.chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?"}, nil)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("sequence %q", got)
	}
	for i, e := range events {
		if e.ID != fmt.Sprint(i+1) {
			t.Fatalf("event %d has id %q", i, e.ID)
		}
	}
	meta := events[0].json(t)
	srcs := events[1].json(t)["sources"].([]any)
	if len(srcs) == 0 || srcs[0].(map[string]any)["documentName"] != "vpn.md" {
		t.Fatalf("sources %v", srcs)
	}
	finish := events[len(events)-2].json(t)
	if finish["status"] != "completed" || finish["title"] != "Test title" || finish["usage"] == nil {
		t.Fatalf("finish %v", finish)
	}
	if events[len(events)-1].Data != "[DONE]" {
		t.Fatalf("done data %q", events[len(events)-1].Data)
	}

	r := c.do("GET", fmt.Sprintf("/api/v1/conversations/%s/messages", meta["conversationId"]), nil)
	var msgs struct {
		Messages []struct {
			Role, Content, Status string
			Sources               []any
		}
	}
	r.json(t, &msgs)
	if len(msgs.Messages) != 2 || msgs.Messages[1].Content != "Hello from the model [1]." || msgs.Messages[1].Status != "completed" || len(msgs.Messages[1].Sources) == 0 {
		t.Fatalf("saved messages %+v", msgs.Messages)
	}
	checkSavedSourcesShape(t, r, srcs)
}

// checkSavedSourcesShape holds the saved messages' sources to their API
// shape (jsonb keeps no key order, so a test of the body's bytes would
// hold nothing): the question has none (no field); the answer's have
// exactly the cited fields, of the cited types, and are the streamed
// sources event's, value for value.
func checkSavedSourcesShape(t *testing.T, r response, streamed []any) {
	t.Helper()
	var raw struct{ Messages []map[string]any }
	r.json(t, &raw)
	if _, ok := raw.Messages[0]["sources"]; ok {
		t.Errorf("the question has sources: %v", raw.Messages[0]["sources"])
	}
	srcs, _ := raw.Messages[1]["sources"].([]any)
	if len(srcs) == 0 {
		t.Fatalf("the answer's sources: %v", raw.Messages[1]["sources"])
	}
	want := map[string]string{"index": "number", "documentId": "string", "documentName": "string", "chunkId": "string", "score": "number", "excerpt": "string"}
	for i, s := range srcs {
		src, _ := s.(map[string]any)
		got := map[string]string{}
		for k, v := range src {
			switch v.(type) {
			case float64:
				got[k] = "number"
			case string:
				got[k] = "string"
			default:
				got[k] = fmt.Sprintf("%T", v)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("source %d: fields %v, want %v", i, got, want)
		}
	}
	if !reflect.DeepEqual(srcs, streamed) {
		t.Errorf("saved sources %v, streamed %v", srcs, streamed)
	}
}

func TestChatRetriesAfter429AndFailsCleanly(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	c := in.adminClient(t)

	start := time.Now()
	_, events := c.chatStream(context.Background(), map[string]any{"question": "rate limited #429"}, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("429 then success: %q", got)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("answered after %v: Retry-After: 1 was not honoured", waited)
	}

	_, events = c.chatStream(context.Background(), map[string]any{"question": "broken #500"}, nil)
	if got := collapse(events); got != "meta sources error finish done" {
		t.Fatalf("500: %q", got)
	}
	if f := events[len(events)-2].json(t); f["status"] != "failed" {
		t.Fatalf("finish %v", f)
	}
}

// With RAGENT_CHAT_DETACHED_TIMEOUT=0 a disconnect stops the answer at
// once (resume_test.go has the default, an answer that runs on).
func TestChatDisconnectCancelsUpstream(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatDetachedTimeout = 0
	in := start(t, cfg)
	c := in.adminClient(t)
	q := "long answer #slow disconnect"

	ctx, cancel := context.WithCancel(context.Background())
	var cancelledAt time.Time
	var convID string
	c.chatStream(ctx, map[string]any{"question": q}, func(e sseEvent) bool {
		if e.Name == "meta" {
			convID = e.json(t)["conversationId"].(string)
		}
		if e.Name == "message" {
			cancelledAt = time.Now()
			cancel()
			return false
		}
		return true
	})
	var at time.Time
	testenv.Eventually(t, 2*time.Second, "the upstream request to be aborted after the disconnect", func() bool {
		var ok bool
		at, ok = llm.abandonedAt(q)
		return ok
	})
	if d := at.Sub(cancelledAt); d > 500*time.Millisecond {
		t.Fatalf("upstream aborted %v after the disconnect", d)
	}
	waitMessageStatus(t, c, convID, "cancelled")
}

// waitMessageStatus waits until the conversation's answer has the status.
func waitMessageStatus(t testing.TB, c *client, convID, status string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the answer saved as "+status, func() bool {
		var msgs struct {
			Messages []struct{ Role, Status string }
		}
		c.do("GET", "/api/v1/conversations/"+convID+"/messages", nil).json(t, &msgs)
		return len(msgs.Messages) == 2 && msgs.Messages[1].Status == status
	})
}

// Stop sent to instance B for a task on instance A aborts the upstream
// request within 500 ms and saves the answer as cancelled; another user can
// neither stop it nor read the conversation.
func TestChatStopAcrossInstances(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	a, b := start(t, cfg), start(t, cfg)
	admin := a.login(t, "admin", "admin-password")
	a.createUser(t, admin, "alice", "alice-password", "user")
	a.createUser(t, admin, "bob", "bob-password", "user")
	alice := a.client(t, a.login(t, "alice", "alice-password"))
	bobOnB := b.client(t, b.login(t, "bob", "bob-password"))
	aliceOnB := b.client(t, alice.token)
	q := "long answer #slow stop"

	var (
		taskID, convID string
		stoppedAt      time.Time
	)
	_, events := alice.chatStream(context.Background(), map[string]any{"question": q}, func(e sseEvent) bool {
		switch e.Name {
		case "meta":
			m := e.json(t)
			taskID, convID = m["taskId"].(string), m["conversationId"].(string)
		case "message":
			if stoppedAt.IsZero() {
				if r := bobOnB.do("POST", "/api/v1/chat/tasks/"+taskID+"/stop", nil); r.Status != http.StatusNotFound {
					t.Errorf("another user's stop: %d %s, want 404", r.Status, r.Body)
				}
				stoppedAt = time.Now()
				if r := aliceOnB.do("POST", "/api/v1/chat/tasks/"+taskID+"/stop", nil); r.Status != http.StatusOK {
					t.Errorf("stop on instance B: %d %s", r.Status, r.Body)
				}
			}
		}
		return true
	})
	if got := collapse(events); got != "meta sources message cancel finish done" {
		t.Fatalf("sequence %q", got)
	}
	if reason := events[len(events)-3].json(t)["reason"]; reason != "user" {
		t.Fatalf("cancel reason %v", reason)
	}
	at, ok := llm.abandonedAt(q)
	if !ok {
		t.Fatal("upstream request was not aborted")
	}
	if d := at.Sub(stoppedAt); d > 500*time.Millisecond {
		t.Fatalf("upstream aborted %v after the stop", d)
	}
	waitMessageStatus(t, alice, convID, "cancelled")

	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/v1/conversations/" + convID + "/messages"},
		{"PATCH", "/api/v1/conversations/" + convID},
		{"DELETE", "/api/v1/conversations/" + convID},
	} {
		var body any
		if tc.method == "PATCH" {
			body = map[string]string{"title": "mine now"}
		}
		if r := bobOnB.do(tc.method, tc.path, body); r.Status != http.StatusNotFound {
			t.Errorf("bob %s %s: %d, want 404", tc.method, tc.path, r.Status)
		}
	}
	if r := bobOnB.do("GET", "/api/v1/conversations", nil); !strings.Contains(string(r.Body), `"items":[]`) {
		t.Errorf("bob sees alice's conversations: %s", r.Body)
	}
	if r := b.client(t, admin).do("GET", "/api/v1/conversations/"+convID+"/messages", nil); r.Status != http.StatusOK {
		t.Errorf("admin reading alice's conversation: %d", r.Status)
	}
}

// TestChatFairQueueAcrossInstances sends 12 new conversations of one user
// through three instances with N = 2: they are admitted in arrival order
// (one user's requests keep FIFO among themselves), and the model never sees
// more than two calls at once of any kind — intent scoring, answers and the
// titles of the new conversations all run under the turn's permit. Answers
// are held until the test lets one finish, so exactly one slot frees at a
// time and the next admission is unambiguous.
func TestChatFairQueueAcrossInstances(t *testing.T) {
	llm := newFakeLLM(t)
	llm.slowTitles.Store(true)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 2, 20, 60*time.Second
	ins := []*instance{start(t, cfg), start(t, cfg), start(t, cfg)}
	admin := ins[0].login(t, "admin", "admin-password")
	// An intent leaf, so every turn also asks the model to score intents.
	kb := seedKnowledge(t, ins[0], admin)
	if r := ins[0].client(t, admin).do("POST", "/api/v1/admin/intents", map[string]any{
		"code": "it", "name": "IT support", "kind": "kb", "knowledgeBaseIds": []string{kb}, "description": "VPN and laptops",
	}); r.Status != http.StatusCreated {
		t.Fatalf("create intent: %d %s", r.Status, r.Body)
	}

	const chats = 12
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		queued = map[string]bool{}
		seqs   = make([]string, chats)
	)
	question := func(i int) string { return fmt.Sprintf("question %02d #gate", i) }
	for i := 0; i < chats; i++ {
		q := question(i)
		inQueue := make(chan struct{})
		var once sync.Once
		wg.Go(func() {
			defer once.Do(func() { close(inQueue) })
			_, events := ins[i%len(ins)].client(t, admin).chatStream(context.Background(), map[string]any{"question": q}, func(e sseEvent) bool {
				if e.Name == "queue" {
					mu.Lock()
					queued[q] = true
					mu.Unlock()
					once.Do(func() { close(inQueue) })
				}
				return true
			})
			seqs[i] = collapse(events)
		})
		// The next chat arrives only once this one runs (its answer started)
		// or waits in the queue.
		if i < cfg.ChatMaxConcurrent {
			if got := llm.nextStart(t); got != q {
				t.Fatalf("answer %q started, want %q", got, q)
			}
		} else {
			<-inQueue
		}
	}
	// Let the running answers finish one at a time, oldest first: each
	// freed slot goes to the oldest waiting chat.
	for i := 0; i < chats; i++ {
		llm.open(question(i))
		if next := i + cfg.ChatMaxConcurrent; next < chats {
			if got := llm.nextStart(t); got != question(next) {
				t.Fatalf("after %q finished, %q was admitted, want %q", question(i), got, question(next))
			}
		}
	}
	wg.Wait()
	if m := llm.maxActive.Load(); m > 2 {
		t.Fatalf("%d upstream answer streams at once, limit 2", m)
	}
	if m := llm.maxCalls.Load(); m > 2 {
		t.Fatalf("%d model calls at once (rewrite, intent, answer and title together), limit 2", m)
	}
	if len(queued) != chats-2 {
		t.Fatalf("%d chats saw queue events, want %d", len(queued), chats-2)
	}
	for i, s := range seqs {
		if s != "meta sources message finish done" && s != "meta queue sources message finish done" {
			t.Fatalf("chat %d sequence %q", i, s)
		}
	}
}

// oneSlotChat starts an instance that answers one chat at a time and
// refuses one that would wait over half a second for the slot; it returns
// the model, the instance and the admin's client.
func oneSlotChat(t *testing.T) (*fakeLLM, *instance, *client) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxWait = 1, 500*time.Millisecond
	in := start(t, cfg)
	return llm, in, in.adminClient(t)
}

// A queue wait beyond the limit is rejected without calling the model.
func TestChatRejectedWhenQueueWaitExceeded(t *testing.T) {
	llm, _, c := oneSlotChat(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holding := make(chan struct{})
	go c.chatStream(ctx, map[string]any{"question": "holder #slow"}, func(e sseEvent) bool {
		if e.Name == "message" {
			select {
			case <-holding:
			default:
				close(holding)
			}
		}
		return true
	})
	<-holding
	var lim struct{ PermitsInUse, MaxConcurrent, QueueLength int }
	c.do("GET", "/api/v1/admin/limiter", nil).json(t, &lim)
	if lim.PermitsInUse != 1 || lim.MaxConcurrent != 1 || lim.QueueLength != 0 {
		t.Fatalf("admin limiter state while one answer streams: %+v", lim)
	}
	before := llm.streams.Load()
	_, events := c.chatStream(context.Background(), map[string]any{"question": "too late"}, nil)
	if got := collapse(events); got != "meta queue reject finish done" {
		t.Fatalf("sequence %q", got)
	}
	rej := events[len(events)-3].json(t)
	if rej["code"] != "busy" || rej["message"] != "系统繁忙，请稍后再试" {
		t.Fatalf("reject %v", rej)
	}
	if f := events[len(events)-2].json(t); f["status"] != "rejected" || f["title"] != nil {
		t.Fatalf("finish %v", f)
	}
	if llm.streams.Load() != before {
		t.Fatal("a rejected request reached the model")
	}
}

func TestChatValidation(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	c := in.adminClient(t)
	tests := []struct {
		name   string
		body   any
		status int
	}{
		{"empty question", map[string]any{"question": "  "}, http.StatusBadRequest},
		{"too long", map[string]any{"question": strings.Repeat("长", 4001)}, http.StatusBadRequest},
		{"unknown conversation", map[string]any{"question": "hi", "conversationId": "12345"}, http.StatusNotFound},
		{"bad conversation id", map[string]any{"question": "hi", "conversationId": "x"}, http.StatusBadRequest},
		{"unknown field", map[string]any{"question": "hi", "foo": 1}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := c.do("POST", "/api/v1/chat", tt.body); r.Status != tt.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tt.status)
			}
		})
	}
}

// Shutdown cancels running streams with reason shutdown and still ends them
// with finish and done.
func TestChatShutdownCancelsStreams(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	c := in.adminClient(t)
	stopped := make(chan struct{})
	_, events := c.chatStream(context.Background(), map[string]any{"question": "long answer #slow shutdown"}, func(e sseEvent) bool {
		if e.Name == "message" {
			select {
			case <-stopped:
			default:
				close(stopped)
				go in.stop()
			}
		}
		return true
	})
	if got := collapse(events); got != "meta sources message cancel finish done" {
		t.Fatalf("sequence %q", got)
	}
	if reason := events[len(events)-3].json(t)["reason"]; reason != "shutdown" {
		t.Fatalf("cancel reason %v, want shutdown", reason)
	}
}

// A double click sends the same question twice: the second is refused
// while the first streams.
func TestChatDuplicateSubmitRefused(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	c := in.adminClient(t)
	body := map[string]any{"question": "same question #slow"}
	streaming := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.chatStream(context.Background(), body, func(e sseEvent) bool {
			if e.Name == "meta" {
				close(streaming)
			}
			return true
		})
	}()
	<-streaming
	if r := c.do("POST", "/api/v1/chat", body); r.Status != http.StatusConflict || r.errorCode(t) != "duplicate_request" {
		t.Fatalf("duplicate chat: %d %s", r.Status, r.Body)
	}
	<-done
	if status, _ := c.chatStream(context.Background(), map[string]any{"question": "same question"}, nil); status != http.StatusOK {
		t.Fatalf("a new question after the first finished: %d", status)
	}
}

// Nothing relevant found: by default the model answers as plain chat, told
// so, with an empty sources list; with refuse a fixed text, no model call.
func TestChatEmptyRetrieval(t *testing.T) {
	for _, policy := range []string{"chat", "refuse"} {
		t.Run(policy, func(t *testing.T) {
			llm := newFakeLLM(t)
			cfg := chatConfig(t, llm)
			cfg.ChatEmptyRetrieval = policy
			in := start(t, cfg)
			admin := in.login(t, "admin", "admin-password")
			seedKnowledge(t, in, admin)
			before := llm.streams.Load()
			_, events := in.client(t, admin).chatStream(context.Background(), map[string]any{"question": "量子色动力学的渐近自由"}, nil)
			if got := collapse(events); got != "meta sources message finish done" {
				t.Fatalf("sequence %q", got)
			}
			if srcs := events[1].json(t)["sources"].([]any); len(srcs) != 0 {
				t.Fatalf("sources for an unrelated question: %v", srcs)
			}
			calls := llm.streams.Load() - before
			if policy == "refuse" && calls != 0 || policy == "chat" && calls != 1 {
				t.Fatalf("%s: %d answer streams from the model", policy, calls)
			}
		})
	}
}

// Reasoning streams as think events only when deepThinking is on, and is
// saved with the answer.
func TestChatDeepThinking(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	c := in.adminClient(t)
	for _, deep := range []bool{true, false} {
		t.Run(fmt.Sprint("deepThinking=", deep), func(t *testing.T) {
			_, events := c.chatStream(context.Background(), map[string]any{"question": "why #think", "deepThinking": deep}, nil)
			var think, answer strings.Builder
			var convID string
			for _, e := range events {
				switch e.Name {
				case "meta":
					convID = e.json(t)["conversationId"].(string)
				case "message":
					m := e.json(t)
					if m["type"] == "think" {
						think.WriteString(m["delta"].(string))
					} else {
						answer.WriteString(m["delta"].(string))
					}
				}
			}
			if answer.String() != "Hello from the model [1]." {
				t.Fatalf("answer %q", answer.String())
			}
			wantThink := ""
			if deep {
				wantThink = "Let me think. The VPN guide applies."
			}
			if think.String() != wantThink {
				t.Fatalf("think deltas %q, want %q", think.String(), wantThink)
			}
			var msgs struct{ Messages []struct{ Thinking string } }
			c.do("GET", "/api/v1/conversations/"+convID+"/messages", nil).json(t, &msgs)
			if got := msgs.Messages[len(msgs.Messages)-1].Thinking; got != wantThink {
				t.Fatalf("saved thinking %q, want %q", got, wantThink)
			}
		})
	}
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	Name string
	ID   string
	Data string
}

func (e sseEvent) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %s data %q: %v", e.Name, e.Data, err)
	}
	return m
}

// chatStream posts a question and calls onEvent for each event until the
// stream ends or onEvent returns false (then the client disconnects).
func (c *client) chatStream(ctx context.Context, body map[string]any, onEvent func(sseEvent) bool) (status int, events []sseEvent) {
	c.t.Helper()
	status, events, _ = streamRequest(c.t, jsonRequest(ctx, c.base+"/api/v1/chat", body, "Authorization", "Bearer "+c.token), onEvent)
	return status, events
}

// jsonRequest is a POST of body as JSON to url with the header pairs.
func jsonRequest(ctx context.Context, url string, body any, headers ...string) *http.Request {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

// streamRequest sends req and reads the event stream of a 200 answer,
// calling onEvent for each event (false stops reading); another answer's
// body comes back as text. A transport error is reported to t (it may be
// called off the test's goroutine) and gives status 0.
func streamRequest(t testing.TB, req *http.Request, onEvent func(sseEvent) bool) (status int, events []sseEvent, text string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		return 0, nil, ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, string(b)
	}
	return resp.StatusCode, readEvents(resp.Body, onEvent), ""
}

// refusedAsEvent returns a refused stream's body as its only event, named
// refusal.
func refusedAsEvent(status int, events []sseEvent, text string) (int, []sseEvent) {
	if status != 0 && status != http.StatusOK {
		return status, []sseEvent{{Name: "refusal", Data: text}}
	}
	return status, events
}

// readEvents parses an event stream, calling onEvent for each event until
// the stream ends or onEvent returns false.
func readEvents(body io.Reader, onEvent func(sseEvent) bool) (events []sseEvent) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" {
				events = append(events, cur)
				if onEvent != nil && !onEvent(cur) {
					return events
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	return events
}

// collapse folds runs of one event (message message → message) for
// sequence checks.
func collapse(events []sseEvent) string {
	var out []string
	for _, e := range events {
		if len(out) > 0 && out[len(out)-1] == e.Name {
			continue
		}
		out = append(out, e.Name)
	}
	return strings.Join(out, " ")
}
