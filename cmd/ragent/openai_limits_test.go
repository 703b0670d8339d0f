package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestOpenAILimits checks the OpenAI-compatible API against /api/v1/chat's
// limits: a client's max_tokens reaches the model within
// RAGENT_CHAT_MAX_ANSWER_TOKENS (which caps every answer, /api/v1/chat's
// too) and beyond it is a 400; an earlier user message is bounded like a
// question; and the history the model sees is bounded in total
// (service.MaxHistoryRunes), however much a client sends.
func TestOpenAILimits(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	in := start(t, cfg)
	admin := in.adminClient(t)
	seedKnowledge(t, in, admin.token)
	key := in.client(t, chatKey(t, admin, "bot"))
	ctx := context.Background()
	answerRequest := func(question string) fakeRequest {
		t.Helper()
		for _, r := range llm.requestsWith(question) {
			if r.Stream && r.Model == "test-model" {
				return r
			}
		}
		t.Fatalf("no answer request for %q", question)
		return fakeRequest{}
	}
	post := func(body map[string]any) oaiStream {
		t.Helper()
		return key.completions(ctx, body, nil)
	}

	if s := post(map[string]any{"model": "ragent", "max_tokens": 100, "messages": userMsg("capped answer VPN")}); s.Status != http.StatusOK {
		t.Fatalf("max_tokens 100: %d %s", s.Status, s.Body)
	}
	if got := answerRequest("capped answer VPN").MaxTokens; got != 100 {
		t.Fatalf("the model was asked for %d tokens, want the client's 100", got)
	}
	if s := post(map[string]any{"model": "ragent", "max_completion_tokens": 50, "messages": userMsg("newer SDK VPN")}); s.Status != http.StatusOK {
		t.Fatalf("max_completion_tokens 50: %d %s", s.Status, s.Body)
	}
	if got := answerRequest("newer SDK VPN").MaxTokens; got != 50 {
		t.Fatalf("the model was asked for %d tokens, want the client's 50", got)
	}
	if s := post(map[string]any{"model": "ragent", "messages": userMsg("default cap VPN")}); s.Status != http.StatusOK {
		t.Fatalf("no max_tokens: %d %s", s.Status, s.Body)
	}
	if got := answerRequest("default cap VPN").MaxTokens; got != cfg.ChatMaxAnswerTokens || got != 4096 {
		t.Fatalf("the model was asked for %d tokens, want the cap %d (4096)", got, cfg.ChatMaxAnswerTokens)
	}
	if _, events := admin.chatStream(ctx, map[string]any{"question": "web UI cap VPN"}, nil); collapse(events) != "meta sources message finish done" {
		t.Fatalf("/api/v1/chat: %q", collapse(events))
	}
	if got := answerRequest("web UI cap VPN").MaxTokens; got != 4096 {
		t.Fatalf("/api/v1/chat asked the model for %d tokens, want the cap 4096", got)
	}

	for name, body := range map[string]map[string]any{
		"max_tokens over the cap": {"model": "ragent", "max_tokens": 4097, "messages": userMsg("too long VPN")},
		"max_tokens 0":            {"model": "ragent", "max_tokens": 0, "messages": userMsg("nothing VPN")},
		"a long user message": {"model": "ragent", "messages": []map[string]any{
			{"role": "user", "content": strings.Repeat("x", 4001)}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and now? VPN"},
		}},
	} {
		s := post(body)
		if e := oaiError(t, response{Status: s.Status, Body: s.Body}); s.Status != http.StatusBadRequest || e.Code != "invalid" || e.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s", name, s.Status, s.Body)
		}
	}

	// The report's request: 16 earlier messages of 16,000 characters (the
	// users' cut to a question's 4,000) reach the model as at most
	// MaxHistoryRunes of history, the newest kept.
	var msgs []map[string]any
	for i := range 16 {
		role, n := "user", 4000
		if i%2 == 1 {
			role, n = "assistant", 16000
		}
		msgs = append(msgs, map[string]any{"role": role, "content": strings.Repeat(string(rune('a'+i)), n)})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "long history VPN"})
	if s := post(map[string]any{"model": "ragent", "messages": msgs}); s.Status != http.StatusOK {
		t.Fatalf("long history: %d %.300s", s.Status, s.Body)
	}
	r := answerRequest(strings.Repeat("p", 100)) // the rewrite asked the question anew
	history := 0
	for _, m := range r.Messages[1 : len(r.Messages)-1] {
		history += utf8.RuneCountInString(m.Content)
	}
	if history > 32000 || history == 0 || !strings.HasPrefix(r.Messages[len(r.Messages)-2].Content, "p") {
		t.Fatalf("the model saw %d characters of history in %d messages (want at most 32000, the newest last)", history, len(r.Messages)-2)
	}
}

// requestsWith returns the requests with a message containing s.
func (f *fakeLLM) requestsWith(s string) []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeRequest
	for _, r := range f.requests {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, s) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
