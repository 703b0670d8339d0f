package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOpenAIErrorsAndValidation: every refusal on /v1 is OpenAI-shaped with
// the right status, and bad, oversized and hostile bodies are refused
// before anything runs.
func TestOpenAIErrorsAndValidation(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))
	searchOnly := in.client(t, createKey(t, admin, map[string]any{"name": "search", "scopes": []string{"search"}}).Key)
	in.createUser(t, admin.token, "bob", "bob-password", "user")
	bob := in.client(t, in.login(t, "bob", "bob-password"))
	adminConv := admin.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("admin's own")}).Header.Get("X-Ragent-Conversation")
	before := llm.streams.Load()

	ok := map[string]any{"model": "ragent", "messages": userMsg("hi")}
	with := func(k string, v any) map[string]any {
		m := map[string]any{"model": "ragent", "messages": userMsg("hi")}
		m[k] = v
		return m
	}
	tests := []struct {
		name    string
		c       *client
		method  string
		path    string
		body    any
		headers []string
		status  int
		typ     string
		code    string
	}{
		{"no credentials", in.client(t, ""), "POST", "/v1/chat/completions", ok, nil, 401, "authentication_error", "unauthenticated"},
		{"bad key", in.client(t, "rk_nope"), "GET", "/v1/models", nil, nil, 401, "authentication_error", "unauthenticated"},
		{"key without chat scope", searchOnly, "POST", "/v1/chat/completions", ok, nil, 403, "permission_error", "forbidden"},
		{"models without chat scope", searchOnly, "GET", "/v1/models", nil, nil, 403, "permission_error", "forbidden"},
		{"unknown route", key, "POST", "/v1/embeddings", ok, nil, 404, "invalid_request_error", "not_found"},
		{"wrong method", key, "GET", "/v1/chat/completions", nil, nil, 405, "invalid_request_error", "method_not_allowed"},
		{"malformed JSON", key, "POST", "/v1/chat/completions", `{"model":`, nil, 400, "invalid_request_error", "malformed_json"},
		{"trailing data", key, "POST", "/v1/chat/completions", `{"model":"ragent","messages":[]} {}`, nil, 400, "invalid_request_error", "malformed_json"},
		{"not JSON", key, "POST", "/v1/chat/completions", ok, []string{"Content-Type", "text/plain"}, 415, "invalid_request_error", "unsupported_type"},
		{"oversized", key, "POST", "/v1/chat/completions", `{"model":"ragent","messages":[{"role":"user","content":"` + strings.Repeat("a", 1<<20) + `"}]}`, nil, 413, "invalid_request_error", "too_large"},
		{"no messages", key, "POST", "/v1/chat/completions", with("messages", []any{}), nil, 400, "invalid_request_error", "invalid"},
		{"last message not the user's", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}}), nil, 400, "invalid_request_error", "invalid"},
		{"empty question", key, "POST", "/v1/chat/completions", with("messages", userMsg("   ")), nil, 400, "invalid_request_error", "invalid"},
		{"question too long", key, "POST", "/v1/chat/completions", with("messages", userMsg(strings.Repeat("长", 4001))), nil, 400, "invalid_request_error", "invalid"},
		{"history message too long", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "assistant", "content": strings.Repeat("a", 16001)}, {"role": "user", "content": "q"}}), nil, 400, "invalid_request_error", "invalid"},
		{"NUL in the question", key, "POST", "/v1/chat/completions", with("messages", userMsg("a\u0000b")), nil, 400, "invalid_request_error", "invalid"},
		{"NUL in a text part", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": "\u0000"}}}}), nil, 400, "invalid_request_error", "invalid"},
		{"image part", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": []map[string]any{{"type": "image_url", "image_url": map[string]string{"url": "http://x/y.png"}}}}}), nil, 400, "invalid_request_error", "invalid"},
		{"content not text", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "user", "content": 42}}), nil, 400, "invalid_request_error", "invalid"},
		{"tool message", key, "POST", "/v1/chat/completions", with("messages", []map[string]any{{"role": "tool", "content": "x"}, {"role": "user", "content": "q"}}), nil, 400, "invalid_request_error", "invalid"},
		{"tools", key, "POST", "/v1/chat/completions", with("tools", []map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}}), nil, 400, "invalid_request_error", "invalid"},
		{"n=2", key, "POST", "/v1/chat/completions", with("n", 2), nil, 400, "invalid_request_error", "invalid"},
		{"json response format", key, "POST", "/v1/chat/completions", with("response_format", map[string]string{"type": "json_object"}), nil, 400, "invalid_request_error", "invalid"},
		{"bad conversation header", key, "POST", "/v1/chat/completions", ok, []string{"X-Ragent-Conversation", "x'; drop"}, 400, "invalid_request_error", "invalid"},
		{"someone else's conversation", bob, "POST", "/v1/chat/completions", ok, []string{"X-Ragent-Conversation", adminConv}, 404, "invalid_request_error", "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.c.forTest(t).do(tt.method, tt.path, tt.body, tt.headers...)
			e := oaiError(t, r)
			if r.Status != tt.status || e.Type != tt.typ || e.Code != tt.code || e.Message == "" {
				t.Fatalf("%d %s, want %d %s %s", r.Status, r.Body, tt.status, tt.typ, tt.code)
			}
			if r.Header.Get("X-Ragent-Conversation") != "" {
				t.Fatalf("an error names a conversation: %v", r.Header)
			}
		})
	}
	if n := llm.streams.Load(); n != before {
		t.Fatalf("refused requests reached the model (%d answers)", n-before)
	}
	// The rest of the API keeps its own error shape.
	if r := key.do("GET", "/api/v1/no-such", nil); !strings.Contains(string(r.Body), `"code":"not_found"`) || strings.Contains(string(r.Body), `"type"`) {
		t.Fatalf("/api/v1 error: %s", r.Body)
	}

	// A browser session is a session: cookie writes need the page's origin.
	token := admin.token
	browser := cookieClient{t: t, base: in.url, cookie: token}
	body := []byte(`{"model":"ragent","messages":[{"role":"user","content":"from a page"}]}`)
	r := browser.do("POST", "/v1/chat/completions", "application/json", body, "Origin", "http://evil.example")
	if e := oaiError(t, r); r.Status != http.StatusForbidden || e.Code != "csrf" {
		t.Fatalf("cross-origin cookie write: %d %s", r.Status, r.Body)
	}
	if r := browser.do("POST", "/v1/chat/completions", "text/plain", body, "Origin", in.url); r.Status != http.StatusForbidden {
		t.Fatalf("text/plain cookie write: %d %s", r.Status, r.Body)
	}
	if r := browser.do("POST", "/v1/chat/completions", "application/json", body, "Origin", in.url); r.Status != http.StatusOK {
		t.Fatalf("same-origin cookie write: %d %s", r.Status, r.Body)
	}
	if r := browser.do("GET", "/v1/models", "", nil); r.Status != http.StatusOK {
		t.Fatalf("models with the cookie: %d %s", r.Status, r.Body)
	}
}

// TestOpenAIQueue: with one slot and one waiting request per user, a
// request that must wait gets its stream started at once and keep-alive
// comments (no queue chunks), then its answer; one refused by a full share
// gets 429 with Retry-After before anything streams, stream or not; the
// chat rate's 429 carries its own Retry-After.
func TestOpenAIQueue(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 1, 1, 60*time.Second
	cfg.SSEKeepAlive = 100 * time.Millisecond
	in := start(t, cfg)
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	var wg sync.WaitGroup
	var holder, waiter oaiStream
	const holdQ = "hold the slot #gate"
	wg.Go(func() {
		holder = key.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg(holdQ)}, nil)
	})
	if q := llm.nextStart(t); q != holdQ {
		t.Fatalf("started %q", q)
	}
	keptAlive := make(chan struct{})
	var once sync.Once
	wg.Go(func() {
		waiter = key.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("waits its turn #gate")}, func(ch oaiChunk) bool {
			if ch.Comment == "keep-alive" {
				once.Do(func() { close(keptAlive) })
			}
			return true
		})
	})
	// Once the second request waits, the user's share of the queue is full.
	waitQueued(t, admin, 1)

	// The user's share is full: a third request is refused before any
	// stream, with Retry-After, stream or not.
	for _, stream := range []bool{true, false} {
		s := key.completions(context.Background(), map[string]any{"model": "ragent", "stream": stream, "messages": userMsg("one too many")}, nil)
		e := oaiError(t, response{Status: s.Status, Body: s.Body})
		if s.Status != http.StatusTooManyRequests || e.Type != "rate_limit_error" || e.Code != "busy" || s.Header.Get("Retry-After") == "" || s.Header.Get("X-Ragent-Conversation") != "" {
			t.Fatalf("stream=%v: %d %v %s", stream, s.Status, s.Header, s.Body)
		}
	}

	// The waiter's stream stays alive while it waits.
	select {
	case <-keptAlive:
	case <-time.After(30 * time.Second):
		t.Fatal("no keep-alive comment while waiting")
	}
	llm.open(holdQ)
	if q := llm.nextStart(t); q != "waits its turn #gate" {
		t.Fatalf("started %q", q)
	}
	llm.open("waits its turn #gate")
	wg.Wait()
	if holder.text() != "Hello from the model [1]." || !holder.Done {
		t.Fatalf("holder %+v", holder)
	}
	if waiter.text() != "Hello from the model [1]." || !waiter.Done {
		t.Fatalf("waiter %+v", waiter)
	}
	var waiting, kept int
	for _, c := range waiter.Comments {
		switch c {
		case "waiting for a model slot":
			waiting++
		case "keep-alive":
			kept++
		}
	}
	if waiting == 0 || kept == 0 {
		t.Fatalf("waiter's comments %q: want the queue's and keep-alives", waiter.Comments)
	}
	for _, ch := range waiter.Chunks {
		if ch.Error != nil {
			t.Fatalf("waiter got an error chunk %+v", ch.Error)
		}
	}
}

// TestOpenAIChatRate: over RAGENT_CHAT_RATE_PER_MINUTE a completion gets
// 429 with the rate's Retry-After, before anything is written.
func TestOpenAIChatRate(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatRatePerMinute = 1
	in := start(t, cfg)
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))
	if r := key.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("first")}); r.Status != http.StatusOK {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	n := conversationCount(t, admin)
	s := key.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("second")}, nil)
	e := oaiError(t, response{Status: s.Status, Body: s.Body})
	if s.Status != http.StatusTooManyRequests || e.Type != "rate_limit_error" || s.Header.Get("Retry-After") == "" || s.Header.Get("Retry-After") == "0" {
		t.Fatalf("over the rate: %d %v %s", s.Status, s.Header, s.Body)
	}
	if got := conversationCount(t, admin); got != n {
		t.Fatalf("a refused turn wrote a conversation: %d, was %d", got, n)
	}
}

// TestOpenAIDisconnectCancelsUpstream: a client that goes away, streaming
// or waiting for a whole completion, aborts the model's request (the fake
// model sees its request context cancelled) and the turn is saved
// cancelled.
func TestOpenAIDisconnectCancelsUpstream(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	waitAbandoned := func(t *testing.T, q string, since time.Time) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if at, ok := llm.abandonedAt(q); ok {
				if at.Before(since) {
					t.Fatalf("abandoned before the client left")
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the model's request for %q was not cancelled after the client left", q)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("stream", func(t *testing.T) {
		const q = "long streamed answer #slow"
		ctx, cancel := context.WithCancel(context.Background())
		var left time.Time
		var conv string
		s := key.forTest(t).completions(ctx, map[string]any{"model": "ragent", "stream": true, "messages": userMsg(q)}, func(ch oaiChunk) bool {
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != nil && *ch.Choices[0].Delta.Content != "" {
				left = time.Now()
				cancel()
				return false
			}
			return true
		})
		conv = s.Header.Get("X-Ragent-Conversation")
		waitAbandoned(t, q, left)
		waitMessageStatus(t, admin, conv, "cancelled")
	})

	t.Run("non-stream", func(t *testing.T) {
		const q = "whole answer held #gate"
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			key.forTest(t).completions(ctx, map[string]any{"model": "ragent", "messages": userMsg(q)}, nil)
		}()
		if got := llm.nextStart(t); got != q {
			t.Fatalf("started %q", got)
		}
		left := time.Now()
		cancel()
		<-done
		waitAbandoned(t, q, left)
	})
}

// TestOpenAIFailuresInStream: once a stream has started, a refusal after
// waiting in the queue and a model failure arrive as OpenAI's in-stream
// error followed by [DONE]; a non-stream request gets them as HTTP errors.
func TestOpenAIFailuresInStream(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxWait = 1, 500*time.Millisecond
	in := start(t, cfg)
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	streamError := func(t *testing.T, s oaiStream) *oaiErr {
		t.Helper()
		if s.Status != http.StatusOK || !s.Done || len(s.Chunks) == 0 {
			t.Fatalf("stream: %d done=%v %s", s.Status, s.Done, s.Body)
		}
		return s.Chunks[len(s.Chunks)-1].Error
	}

	t.Run("model fails", func(t *testing.T) {
		s := key.forTest(t).completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("broken #500")}, nil)
		if e := streamError(t, s); e == nil || e.Code != "llm_unavailable" || e.Type != "server_error" {
			t.Fatalf("last chunk %+v", s.Chunks[len(s.Chunks)-1])
		}
		r := key.forTest(t).do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("broken again #500")})
		if e := oaiError(t, r); r.Status != http.StatusServiceUnavailable || e.Code != "llm_unavailable" {
			t.Fatalf("non-stream: %d %s", r.Status, r.Body)
		}
	})

	t.Run("refused after waiting", func(t *testing.T) {
		const holdQ = "holds the only slot #gate"
		done := make(chan struct{})
		go func() {
			defer close(done)
			key.forTest(t).completions(context.Background(), map[string]any{"model": "ragent", "messages": userMsg(holdQ)}, nil)
		}()
		if q := llm.nextStart(t); q != holdQ {
			t.Fatalf("started %q", q)
		}
		s := key.forTest(t).completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg("waits too long")}, nil)
		if e := streamError(t, s); e == nil || e.Code != "busy" || e.Type != "rate_limit_error" {
			t.Fatalf("chunks %+v comments %q", s.Chunks, s.Comments)
		}
		r := key.forTest(t).do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("waits too long, whole")})
		if e := oaiError(t, r); r.Status != http.StatusTooManyRequests || e.Code != "busy" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("non-stream: %d %v %s", r.Status, r.Header, r.Body)
		}
		llm.open(holdQ)
		<-done
	})
}

// TestOpenAIStopByTask: the X-Ragent-Task header's task can be stopped with
// /api/v1/chat/tasks/{taskId}/stop; the stream then ends as a (short)
// answer with finish_reason stop and [DONE], and the turn is saved
// cancelled.
func TestOpenAIStopByTask(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	admin := in.adminClient(t)
	key := in.client(t, chatKey(t, admin, "bot"))

	b, _ := json.Marshal(map[string]any{"model": "ragent", "stream": true, "messages": userMsg("stop me #slow")})
	req, _ := http.NewRequest("POST", in.url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	task, conv := resp.Header.Get("X-Ragent-Task"), resp.Header.Get("X-Ragent-Conversation")
	sc := bufio.NewScanner(resp.Body)
	var text, finish string
	stopped, done := false, false
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if line == "[DONE]" {
			done = true
			break
		}
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ch oaiChunk
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Error != nil {
			t.Fatalf("error chunk %+v", ch.Error)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				text += *c.Delta.Content
			}
			if c.Finish != nil {
				finish = *c.Finish
			}
		}
		if text != "" && !stopped {
			stopped = true
			if r := key.do("POST", "/api/v1/chat/tasks/"+task+"/stop", nil); r.Status != http.StatusOK {
				t.Fatalf("stop: %d %s", r.Status, r.Body)
			}
		}
	}
	if !done || finish != "stop" || !strings.HasPrefix(text, "part0") || strings.Contains(text, "part39") {
		t.Fatalf("done=%v finish %q text %q", done, finish, text)
	}
	waitMessageStatus(t, admin, conv, "cancelled")
}
