package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// The failure modes of DESIGN §11 that the other test files do not cover.

// A model that never sends its first token ends in an error event, not a
// hung stream.
func TestChatFirstTokenTimeout(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.LLMFirstTokenTimeout = 500 * time.Millisecond
	in := start(t, cfg)
	c := in.adminClient(t)
	start := time.Now()
	_, events := c.chatStream(context.Background(), map[string]any{"question": "silent model #silent"}, nil)
	if got := collapse(events); got != "meta sources error finish done" {
		t.Fatalf("sequence %q", got)
	}
	if e := events[2].json(t); e["code"] != "llm_unavailable" {
		t.Fatalf("error event %v", e)
	}
	// The model never answers, so the error event itself proves the
	// timeout; the bound only catches a stream that waited for something
	// else (an HTTP client timeout) instead, without racing a loaded machine.
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("stream took %v with a 500 ms first-token timeout", d)
	}
}

// redisDownInstance starts an instance whose Redis goes through a proxy.
func redisDownInstance(t *testing.T, cfg Config) (*instance, *testenv.Proxy) {
	t.Helper()
	proxy, url := testenv.RedisProxyURL(t)
	cfg.RedisURL, cfg.WorkerID = url, 11
	return start(t, cfg), proxy
}

// Redis down: the chat limiter follows RAGENT_CHAT_LIMITER_ON_REDIS_ERROR
// (and the chat rate limit fails open).
func TestChatLimiterRedisDown(t *testing.T) {
	for _, tt := range []struct {
		policy string
		want   string
	}{
		{"reject", "meta reject finish done"},
		{"local", "meta sources message finish done"},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			llm := newFakeLLM(t)
			cfg := chatConfig(t, llm)
			cfg.ChatOnRedisError = tt.policy
			// The per-user chat rate is on too: with Redis down it lets the
			// chat through, and the queue's policy decides.
			cfg.ChatRatePerMinute = 100
			in, proxy := redisDownInstance(t, cfg)
			c := in.adminClient(t)
			proxy.Down()
			_, events := c.chatStream(context.Background(), map[string]any{"question": "is redis there?"}, nil)
			if got := collapse(events); got != tt.want {
				t.Fatalf("sequence %q, want %q", got, tt.want)
			}
			if tt.policy == "reject" {
				if code := events[1].json(t)["code"]; code != "unavailable" {
					t.Fatalf("reject code %v", code)
				}
			}
			// The limiter asks Redis again a second after a failure.
			proxy.Up()
			testenv.Eventually(t, 10*time.Second, "a full answer after Redis came back", func() bool {
				_, events = c.chatStream(context.Background(), map[string]any{"question": "and now?"}, nil)
				return collapse(events) == "meta sources message finish done"
			})
		})
	}
}

// Redis down: a stop still works on the instance running the task; from
// another instance it reports 503.
func TestStopWithRedisDown(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatLimiterEnabled = false
	a, proxyA := redisDownInstance(t, cfg)
	b, proxyB := redisDownInstance(t, cfg)
	token := a.login(t, "admin", "admin-password")
	ca, cb := a.client(t, token), b.client(t, token)

	run := func(q string, stopOn *client, wantStatus int) []sseEvent {
		_, events := ca.chatStream(context.Background(), map[string]any{"question": q}, func(e sseEvent) bool {
			if e.Name == "meta" {
				proxyA.Down()
				proxyB.Down()
				task := e.json(t)["taskId"].(string)
				go func() {
					if r := stopOn.do("POST", "/api/v1/chat/tasks/"+task+"/stop", nil); r.Status != wantStatus {
						t.Errorf("stop: %d %s, want %d", r.Status, r.Body, wantStatus)
					}
					if wantStatus != http.StatusOK {
						proxyA.Up()
						stopOn.do("POST", "/api/v1/chat/tasks/"+task+"/stop", nil)
					}
				}()
			}
			return true
		})
		proxyA.Up()
		proxyB.Up()
		return events
	}
	if got := collapse(run("local stop #slow", ca, http.StatusOK)); !strings.HasSuffix(got, "cancel finish done") {
		t.Fatalf("local stop with Redis down: %q", got)
	}
	run("remote stop #slow", cb, http.StatusServiceUnavailable)
}

// Postgres down: the API answers 503 and readiness fails; it recovers.
func TestPostgresDown(t *testing.T) {
	cfg := testConfig(t)
	proxy, url := testenv.PostgresProxyURL(t)
	cfg.DatabaseURL = url
	in := start(t, cfg)
	c := in.adminClient(t)

	proxy.Down()
	if r := in.client(t, "").do("GET", "/readyz", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with Postgres down: %d", r.Status)
	}
	for _, path := range []string{"/api/v1/me", "/api/v1/knowledge-bases"} {
		if r := c.do("GET", path, nil); r.Status != http.StatusServiceUnavailable || r.errorCode(t) != "unavailable" {
			t.Fatalf("GET %s with Postgres down: %d %s", path, r.Status, r.Body)
		}
	}
	proxy.Up()
	testenv.Eventually(t, 10*time.Second, "the API to recover after Postgres came back", func() bool {
		return c.do("GET", "/api/v1/knowledge-bases", nil).Status == http.StatusOK
	})
}

// Redis down longer than the worker-id lease: writes go on while the
// instance's lease is valid by its own clock, then answer 503 unavailable
// with Retry-After (never 500), and succeed again once Redis is back. The
// lease is 5 s here to keep the test short; the default is 5 minutes.
func TestWritesOutlastRedisWhileWorkerLeaseValid(t *testing.T) {
	cfg := testConfig(t)
	proxy, url := testenv.RedisProxyURL(t)
	cfg.RedisURL, cfg.WorkerID, cfg.WorkerLeaseTTL = url, -1, 5*time.Second
	in := start(t, cfg)
	c := in.adminClient(t)
	n := 0
	create := func() response {
		n++
		return c.do("POST", "/api/v1/knowledge-bases", map[string]any{"name": fmt.Sprintf("outage-%d", n)})
	}

	proxy.Down()
	if r := create(); r.Status != http.StatusCreated {
		t.Fatalf("a write just after Redis went away: %d %s, want 201 (the lease is still valid)", r.Status, r.Body)
	}
	var refused response
	testenv.Eventually(t, 30*time.Second, "writes to be refused once the lease ran out", func() bool {
		r := create()
		switch r.Status {
		case http.StatusCreated:
			return false
		case http.StatusServiceUnavailable:
			refused = r
			return true
		}
		t.Fatalf("a write during the outage: %d %s, want 201 or 503", r.Status, r.Body)
		return false
	})
	if code := refused.errorCode(t); code != "unavailable" {
		t.Fatalf("refusal code %q, want unavailable", code)
	}
	if s, err := strconv.Atoi(refused.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("refusal Retry-After %q, want whole seconds", refused.Header.Get("Retry-After"))
	}
	// Stopped for good, not now and then, until Redis answers again.
	if r := create(); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("a write after the lease ran out: %d %s, want 503", r.Status, r.Body)
	}

	proxy.Up()
	testenv.Eventually(t, 30*time.Second, "writes to succeed after Redis came back", func() bool {
		r := create()
		if r.Status != http.StatusCreated && r.Status != http.StatusServiceUnavailable {
			t.Fatalf("a write after Redis came back: %d %s", r.Status, r.Body)
		}
		return r.Status == http.StatusCreated
	})
}
