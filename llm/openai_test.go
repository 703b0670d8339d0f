package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// sse writes one server-sent event and flushes it.
func sse(w http.ResponseWriter, v any) {
	data := "[DONE]"
	if v != nil {
		b, _ := json.Marshal(v)
		data = string(b)
	}
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func delta(field, s string) map[string]any {
	return map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{field: s}, "finish_reason": nil}}}
}

func finish() map[string]any {
	return map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}}
}

func usageChunk(p, c int) map[string]any {
	return map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}}
}

// streamEvents writes a complete stream: the events, then [DONE].
func streamEvents(w http.ResponseWriter, events ...any) {
	startSSE(w)
	for _, e := range events {
		sse(w, e)
	}
	sse(w, nil)
}

// streamAnswer writes a complete stream of the given content pieces.
func streamAnswer(w http.ResponseWriter, pieces ...string) {
	events := []any{delta("role", "assistant")}
	for _, p := range pieces {
		events = append(events, delta("content", p))
	}
	streamEvents(w, append(events, finish())...)
}

// failWith returns a handler that answers every request with status and
// body.
func failWith(status int, body string) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { http.Error(w, body, status) }
}

// fastConfig keeps retries quick so tests measure only what they mean to.
func fastConfig(base string) Config {
	return Config{Provider: ProviderOpenAI, BaseURL: base, APIKey: "sk-test", FirstTokenTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
}

// chatFor returns cfg's chat model for "test-model" (the offline model has
// no name).
func chatFor(t *testing.T, cfg Config) service.ChatModel {
	t.Helper()
	m, err := NewChatModel(cfg, "test-model")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var question = service.ChatRequest{Messages: []service.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say hello"}}}

func TestOpenAIStream(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		startSSE(w)
		fmt.Fprint(w, ": keep-alive\n\n")
		sse(w, delta("role", "assistant"))
		for _, p := range []string{"Hel", "lo", " world"} {
			time.Sleep(20 * time.Millisecond)
			sse(w, delta("content", p))
		}
		sse(w, finish())
		sse(w, usageChunk(12, 3))
		sse(w, nil)
	})
	deltas, usage, err := collect(t, context.Background(), chatFor(t, fastConfig(v.srv.URL)), question)
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas) != 3 || joined(deltas, service.DeltaResponse) != "Hello world" {
		t.Fatalf("deltas %+v", deltas)
	}
	if usage != (service.Usage{PromptTokens: 12, CompletionTokens: 3, TotalTokens: 15}) {
		t.Fatalf("usage %+v", usage)
	}
	_, hdr, body := v.request(0)
	if body["model"] != "test-model" || body["stream"] != true || hdr.Get("Authorization") != "Bearer sk-test" {
		t.Fatalf("request %v %v", body, hdr)
	}
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Fatalf("stream_options %v", body["stream_options"])
	}
	if _, ok := body["response_format"]; ok {
		t.Fatalf("response_format sent without JSON: %v", body)
	}
}

func TestOpenAIRequestOptions(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, `{"a":1}`) })
	req := question
	req.JSON, req.Temperature, req.MaxTokens, req.Model = true, 0.2, 64, "override"
	deltas, usage, err := collect(t, context.Background(), chatFor(t, fastConfig(v.srv.URL)), req)
	if err != nil {
		t.Fatal(err)
	}
	if joined(deltas, service.DeltaResponse) != `{"a":1}` {
		t.Fatalf("deltas %+v", deltas)
	}
	// No usage chunk: the usage is estimated.
	if usage.PromptTokens == 0 || usage.CompletionTokens == 0 {
		t.Fatalf("estimated usage %+v", usage)
	}
	_, _, body := v.request(0)
	rf, _ := body["response_format"].(map[string]any)
	if body["model"] != "override" || body["temperature"] != 0.2 || body["max_tokens"] != float64(64) || rf["type"] != "json_object" {
		t.Fatalf("request %v", body)
	}
}

func TestOpenAIReasoning(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		streamEvents(w, delta("reasoning_content", "The user "), delta("reasoning", "wants a greeting."),
			delta("content", "Hello"), finish())
	})
	m := chatFor(t, fastConfig(v.srv.URL))
	tests := []struct {
		thinking  bool
		wantThink string
	}{
		{thinking: true, wantThink: "The user wants a greeting."},
		{thinking: false, wantThink: ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("thinking=%v", tt.thinking), func(t *testing.T) {
			req := question
			req.Thinking = tt.thinking
			deltas, _, err := collect(t, context.Background(), m, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := joined(deltas, service.DeltaThink); got != tt.wantThink {
				t.Fatalf("think %q, want %q", got, tt.wantThink)
			}
			if got := joined(deltas, service.DeltaResponse); got != "Hello" {
				t.Fatalf("response %q", got)
			}
			if tt.thinking && deltas[0].Kind != service.DeltaThink {
				t.Fatalf("reasoning must come first: %+v", deltas)
			}
		})
	}
}

func TestOpenAIRetryAfter(t *testing.T) {
	v := newVendor(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"rate limited"}}`, http.StatusTooManyRequests)
			return
		}
		streamAnswer(w, "ok")
	})
	deltas, _, err := collect(t, context.Background(), chatFor(t, fastConfig(v.srv.URL)), question)
	if err != nil {
		t.Fatal(err)
	}
	if joined(deltas, service.DeltaResponse) != "ok" || v.calls() != 2 {
		t.Fatalf("deltas %+v after %d calls", deltas, v.calls())
	}
	// The backoff is 10 ms, so only the header explains a wait of a second.
	if waited := v.arrival(1).Sub(v.arrival(0)); waited < time.Second || waited > 2*time.Second {
		t.Fatalf("waited %v between attempts, want Retry-After's 1s (≤ 2s)", waited)
	}
}

func TestOpenAIFailures(t *testing.T) {
	tests := []struct {
		name      string
		handle    func(n int, w http.ResponseWriter, r *http.Request)
		retries   int
		wantCalls int
		wantText  string
		wantErr   string
	}{
		{
			name:      "500 until retries are exhausted",
			handle:    failWith(http.StatusInternalServerError, "boom"),
			retries:   2,
			wantCalls: 3,
			wantErr:   "upstream status 500",
		},
		{
			name: "503 then success",
			handle: func(n int, w http.ResponseWriter, _ *http.Request) {
				if n < 2 {
					http.Error(w, "overloaded", http.StatusServiceUnavailable)
					return
				}
				streamAnswer(w, "fine")
			},
			retries:   3,
			wantCalls: 3,
			wantText:  "fine",
		},
		{
			name:      "400 is not retried",
			handle:    failWith(http.StatusBadRequest, "no such model"),
			retries:   3,
			wantCalls: 1,
			wantErr:   "upstream status 400: no such model",
		},
		{
			name: "a dropped connection before the first token is retried",
			handle: func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 0 {
					dropConnection(w)
					return
				}
				streamAnswer(w, "again")
			},
			retries:   1,
			wantCalls: 2,
			wantText:  "again",
		},
		{
			name: "a dropped connection after a token is not retried",
			handle: func(_ int, w http.ResponseWriter, _ *http.Request) {
				startSSE(w)
				sse(w, delta("content", "partial"))
				dropConnection(w)
			},
			retries:   3,
			wantCalls: 1,
			wantText:  "partial",
			wantErr:   "unavailable",
		},
		{
			name: "a stream cut short without a finish is an error",
			handle: func(_ int, w http.ResponseWriter, _ *http.Request) {
				startSSE(w)
				sse(w, delta("content", "half"))
			},
			retries:   3,
			wantCalls: 1,
			wantText:  "half",
			wantErr:   "unexpected EOF",
		},
		{
			name: "an error inside the stream",
			handle: func(_ int, w http.ResponseWriter, _ *http.Request) {
				startSSE(w)
				sse(w, map[string]any{"error": map[string]any{"message": "content filtered"}})
			},
			retries:   3,
			wantCalls: 1,
			wantErr:   "content filtered",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVendor(t, tt.handle)
			cfg := fastConfig(v.srv.URL)
			cfg.MaxRetries = tt.retries
			deltas, _, err := collect(t, context.Background(), chatFor(t, cfg), question)
			if got := joined(deltas, service.DeltaResponse); got != tt.wantText {
				t.Errorf("text %q, want %q", got, tt.wantText)
			}
			if got := v.calls(); got != tt.wantCalls {
				t.Errorf("%d calls, want %d", got, tt.wantCalls)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.wantErr != "" && (!errors.Is(err, service.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want ErrUnavailable containing %q", err, tt.wantErr)
			}
		})
	}
}

// dropConnection closes the TCP connection without a proper HTTP ending.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func TestOpenAITimeouts(t *testing.T) {
	tests := []struct {
		name     string
		handle   func(w http.ResponseWriter, r *http.Request)
		wantText string
		wantErr  string
	}{
		{
			name: "slow first token",
			handle: func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, delta("role", "assistant")) // not a token
				<-r.Context().Done()
			},
			wantErr: "no first token within 300ms",
		},
		{
			name: "no headers at all",
			handle: func(_ http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			},
			wantErr: "no first token within 300ms",
		},
		{
			name: "silence between tokens",
			handle: func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				sse(w, delta("content", "one"))
				time.Sleep(100 * time.Millisecond)
				sse(w, delta("content", " two"))
				<-r.Context().Done()
			},
			wantText: "one two",
			wantErr:  "no token for 300ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) { tt.handle(w, r) })
			cfg := fastConfig(v.srv.URL)
			cfg.FirstTokenTimeout, cfg.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
			start := time.Now()
			deltas, _, err := collect(t, context.Background(), chatFor(t, cfg), question)
			elapsed := time.Since(start)
			if !errors.Is(err, service.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrUnavailable containing %q", err, tt.wantErr)
			}
			if got := joined(deltas, service.DeltaResponse); got != tt.wantText {
				t.Errorf("text %q, want %q", got, tt.wantText)
			}
			if elapsed > 2*time.Second {
				t.Errorf("took %v to time out", elapsed)
			}
			if v.calls() != 1 {
				t.Errorf("%d calls: a timeout must not be retried", v.calls())
			}
		})
	}
}

func TestOpenAICancelAbortsUpstream(t *testing.T) {
	aborted := make(chan time.Time, 1)
	v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		sse(w, delta("content", "first"))
		select {
		case <-r.Context().Done(): // the abandoned connection detector
			aborted <- time.Now()
		case <-time.After(10 * time.Second):
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelledAt time.Time
	_, err := chatFor(t, fastConfig(v.srv.URL)).Stream(ctx, question, func(service.Delta) error {
		cancelledAt = time.Now()
		cancel() // as a stop request or a client disconnect does
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	select {
	case at := <-aborted:
		if d := at.Sub(cancelledAt); d > 500*time.Millisecond {
			t.Fatalf("server saw the abort %v after the cancel", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("server never saw the connection close")
	}
}

func TestOpenAICallbackError(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "a", "b", "c") })
	stop := errors.New("client went away")
	n := 0
	_, err := chatFor(t, fastConfig(v.srv.URL)).Stream(context.Background(), question, func(service.Delta) error {
		n++
		return stop
	})
	if err != stop || n != 1 || v.calls() != 1 {
		t.Fatalf("err = %v after %d deltas and %d calls, want the onDelta error unchanged after 1", err, n, v.calls())
	}
}

func TestNewChatModelValidates(t *testing.T) {
	for _, cfg := range []Config{{Provider: "gpt"}, {Provider: ProviderOpenAI}} {
		if _, err := NewChatModel(cfg, ""); !errors.Is(err, service.ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", cfg, err)
		}
	}
}
