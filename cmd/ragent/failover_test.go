package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/llm"
)

// TestChatFailoverAcrossInstances runs two instances on one Redis with a
// primary model that answers 503 and a fallback from
// RAGENT_LLM_FALLBACKS_FILE: the first instance's chat fails over and
// cools the primary down in Redis; the second instance's chat then never
// calls the primary.
func TestChatFailoverAcrossInstances(t *testing.T) {
	primary, backup := newFakeLLM(t), newFakeLLM(t)
	primary.status.Store(http.StatusServiceUnavailable)
	cfg := chatConfig(t, primary)
	file := filepath.Join(t.TempDir(), "fallbacks.json")
	spec := fmt.Sprintf(`[{"name":"backup","provider":"openai","baseURL":%q,"chatModel":"test-model","fastModel":"test-fast"}]`, backup.URL())
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if cfg.LLMFallbacks, err = llm.LoadFallbacks(file, os.Getenv); err != nil {
		t.Fatal(err)
	}
	in1, in2 := start(t, cfg), start(t, cfg)
	admin := in1.login(t, "admin", "admin-password")
	seedKnowledge(t, in1, admin)

	_, events := in1.client(t, admin).chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?"}, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("instance 1: %q", got)
	}
	if f := events[len(events)-2].json(t); f["status"] != "completed" {
		t.Fatalf("finish %v", f)
	}
	// Only the turn's first model call reached the primary: its 503 cooled
	// it down for every later call.
	if n := primary.received.Load(); n != 1 {
		t.Fatalf("primary got %d requests, want 1", n)
	}
	if backup.streams.Load() != 1 {
		t.Fatalf("backup streamed %d answers", backup.streams.Load())
	}
	key := cfg.RedisPrefix + "llm:cooldown:openai/test-model"
	if ttl := testenv.Redis(t).PTTL(context.Background(), key).Val(); ttl <= 0 || ttl > cfg.LLMCooldown {
		t.Fatalf("%s has TTL %v, want ≤ %v", key, ttl, cfg.LLMCooldown)
	}

	_, events = in2.client(t, admin).chatStream(context.Background(), map[string]any{"question": "And on a phone?"}, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("instance 2: %q", got)
	}
	if n := primary.received.Load(); n != 1 {
		t.Fatalf("instance 2 called the primary (%d requests) while it cooled down", n)
	}
	if backup.streams.Load() != 2 {
		t.Fatalf("backup streamed %d answers, want 2", backup.streams.Load())
	}

	// Per-endpoint metrics.
	resp, err := http.Get(in1.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`ragent_llm_calls_total{endpoint="openai/test-model",outcome="failover"} 1`,
		`ragent_llm_calls_total{endpoint="backup",outcome="ok"}`,
		`ragent_llm_cooldown_skips_total{endpoint="openai/test-model"}`,
		`ragent_llm_first_token_seconds_count{endpoint="backup"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestChatDeepThinkingAsksTheModel: with RAGENT_LLM_THINKING=enable_thinking
// the chat's deepThinking toggle reaches the upstream request as
// "enable_thinking": true on the answer, and every other call (the title)
// sends false.
func TestChatDeepThinkingAsksTheModel(t *testing.T) {
	model := newFakeLLM(t)
	cfg := chatConfig(t, model)
	cfg.LLMThinking = "enable_thinking"
	in := start(t, cfg)
	c := in.adminClient(t)

	_, events := c.chatStream(context.Background(), map[string]any{"question": "why #think", "deepThinking": true}, nil)
	if got := collapse(events); !strings.HasPrefix(got, "meta sources message") || !strings.HasSuffix(got, "finish done") {
		t.Fatalf("sequence %q", got)
	}
	if on, off := model.thinkingOn.Load(), model.thinkingOff.Load(); on != 1 || off < 1 {
		t.Fatalf("enable_thinking true %d times, false %d times; want the answer only to ask", on, off)
	}
	_, events = c.chatStream(context.Background(), map[string]any{"question": "why not", "deepThinking": false}, nil)
	if got := collapse(events); !strings.HasSuffix(got, "finish done") {
		t.Fatalf("sequence %q", got)
	}
	if on := model.thinkingOn.Load(); on != 1 {
		t.Fatalf("a chat without deepThinking asked for thinking (%d)", on)
	}
}
