package llm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tmc/langchaingo/llms"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// This file tests each provider path against an in-test server speaking
// that vendor's wire format, streaming included.

// vendor is an in-test server that records each request (whose body must
// be JSON; handle can read it again) and answers the n-th (0-based) with
// handle.
type vendor struct {
	srv    *httptest.Server
	handle func(n int, w http.ResponseWriter, r *http.Request)

	mu       sync.Mutex
	paths    []string // path?query
	headers  []http.Header
	bodies   []map[string]any
	arrivals []time.Time
}

func newVendor(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request)) *vendor {
	t.Helper()
	v := &vendor{handle: handle}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body: %v", err)
		}
		v.mu.Lock()
		n := len(v.paths)
		v.paths = append(v.paths, r.URL.RequestURI())
		v.headers = append(v.headers, r.Header.Clone())
		v.bodies = append(v.bodies, body)
		v.arrivals = append(v.arrivals, time.Now())
		v.mu.Unlock()
		v.handle(n, w, r)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *vendor) request(i int) (string, http.Header, map[string]any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.paths[i], v.headers[i], v.bodies[i]
}

// arrival is when the i-th request came in.
func (v *vendor) arrival(i int) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.arrivals[i]
}

func (v *vendor) calls() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.paths)
}

func modelFor(t *testing.T, cfg Config, model string) service.ChatModel {
	t.Helper()
	cfg.BackoffBase, cfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	if cfg.FirstTokenTimeout == 0 {
		cfg.FirstTokenTimeout, cfg.IdleTimeout = 5*time.Second, 5*time.Second
	}
	m, err := NewChatModel(cfg, model)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func thinkingQuestion(on bool) service.ChatRequest {
	q := question
	q.Thinking = on
	return q
}

// streamThinking asks m with the deep-thinking toggle and checks that the
// reasoning is shown only when asked for, then the answer and the usage.
func streamThinking(t *testing.T, m service.ChatModel, thinking bool, reasoning, answer string, want service.Usage) {
	t.Helper()
	deltas, usage, err := collect(t, context.Background(), m, thinkingQuestion(thinking))
	if err != nil {
		t.Fatal(err)
	}
	if !thinking {
		reasoning = ""
	}
	if joined(deltas, service.DeltaThink) != reasoning || joined(deltas, service.DeltaResponse) != answer {
		t.Fatalf("thinking=%v: deltas %+v", thinking, deltas)
	}
	if usage != want {
		t.Fatalf("usage %+v, want %+v", usage, want)
	}
}

// --- Ollama: native /api/chat, NDJSON ---------------------------------

func ndjson(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
	w.(http.Flusher).Flush()
}

func TestOllamaNativeChat(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		msg := func(thinking, content string) map[string]any {
			return map[string]any{"model": "qwen3", "message": map[string]any{"role": "assistant", "content": content, "thinking": thinking}, "done": false}
		}
		ndjson(w, msg("The user ", ""))
		ndjson(w, msg("greets.", ""))
		ndjson(w, msg("", "Hel"))
		ndjson(w, msg("", "lo"))
		ndjson(w, map[string]any{"model": "qwen3", "message": map[string]any{"role": "assistant", "content": ""}, "done": true, "done_reason": "stop", "prompt_eval_count": 21, "eval_count": 9})
	})
	for i, base := range []string{v.srv.URL, v.srv.URL + "/v1/"} {
		m := modelFor(t, Config{Provider: ProviderOllama, BaseURL: base}, "qwen3")
		for j, thinking := range []bool{true, false} {
			streamThinking(t, m, thinking, "The user greets.", "Hello", service.Usage{PromptTokens: 21, CompletionTokens: 9, TotalTokens: 30})
			path, _, body := v.request(2*i + j)
			// Deep thinking is asked for with the top-level think switch,
			// and turned off for other calls.
			if path != "/api/chat" || body["model"] != "qwen3" || body["stream"] != true || body["think"] != thinking {
				t.Fatalf("request %s %v", path, body)
			}
		}
	}
}

func TestOllamaStreamError(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		ndjson(w, map[string]any{"message": map[string]any{"content": "Hi"}, "done": false})
		ndjson(w, map[string]any{"error": "model runner crashed"})
	})
	_, _, err := collect(t, context.Background(), modelFor(t, Config{Provider: ProviderOllama, BaseURL: v.srv.URL}, "qwen3"), question)
	if !errors.Is(err, service.ErrUnavailable) || !strings.Contains(err.Error(), "model runner crashed") || v.calls() != 1 {
		t.Fatalf("err = %v after %d calls", err, v.calls())
	}
}

// --- Azure OpenAI: deployment URL, api-version, api-key ---------------

func TestAzureDeployment(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "Hi", " there") })
	m := modelFor(t, Config{Provider: ProviderAzure, BaseURL: v.srv.URL + "/", APIKey: "az-key"}, "gpt4o-prod")
	deltas, _, err := collect(t, context.Background(), m, question)
	if err != nil || joined(deltas, service.DeltaResponse) != "Hi there" {
		t.Fatalf("err %v, deltas %+v", err, deltas)
	}
	path, hdr, _ := v.request(0)
	if path != "/openai/deployments/gpt4o-prod/chat/completions?api-version="+DefaultAzureAPIVersion {
		t.Fatalf("path %s", path)
	}
	if hdr.Get("api-key") != "az-key" || hdr.Get("Authorization") != "" {
		t.Fatalf("headers %v", hdr)
	}
	m = modelFor(t, Config{Provider: ProviderAzure, BaseURL: v.srv.URL, APIKey: "az-key", APIVersion: "2025-01-01-preview"}, "gpt4o-prod")
	if _, _, err := collect(t, context.Background(), m, question); err != nil {
		t.Fatal(err)
	}
	if path, _, _ := v.request(1); !strings.HasSuffix(path, "api-version=2025-01-01-preview") {
		t.Fatalf("path %s", path)
	}
}

// --- Mistral: OpenAI-shaped SSE without stream_options ----------------

func TestMistralChat(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		streamEvents(w, delta("role", "assistant"), delta("content", "Bonjour"),
			// Mistral puts the usage on the chunk with the finish reason.
			map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": ""}, "finish_reason": "stop"}},
				"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})
	})
	m := modelFor(t, Config{Provider: ProviderMistral, BaseURL: v.srv.URL + "/v1", APIKey: "mk"}, "mistral-small-latest")
	deltas, usage, err := collect(t, context.Background(), m, question)
	if err != nil || joined(deltas, service.DeltaResponse) != "Bonjour" || usage.TotalTokens != 12 {
		t.Fatalf("err %v, deltas %+v, usage %+v", err, deltas, usage)
	}
	path, hdr, body := v.request(0)
	if _, sent := body["stream_options"]; path != "/v1/chat/completions" || hdr.Get("Authorization") != "Bearer mk" || sent || body["model"] != "mistral-small-latest" {
		t.Fatalf("request %s %v %v", path, hdr, body)
	}
}

// --- Deep thinking: the OpenAI-compatible parameters ------------------

func TestDeepThinkingOpenAICompatible(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "ok") })
	tests := []struct {
		name       string
		cfg        Config
		thinking   bool
		wantModel  string
		wantEnable any // nil: the field is absent
	}{
		{"auto sends nothing", Config{}, true, "qwen3-32b", nil},
		{"enable_thinking on", Config{Thinking: ThinkingEnable}, true, "qwen3-32b", true},
		{"enable_thinking off for other calls", Config{Thinking: ThinkingEnable}, false, "qwen3-32b", false},
		{"a reasoning model", Config{ThinkingModel: "deepseek-reasoner"}, true, "deepseek-reasoner", nil},
		{"the reasoning model only when asked", Config{ThinkingModel: "deepseek-reasoner"}, false, "qwen3-32b", nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Provider, cfg.BaseURL = ProviderOpenAI, v.srv.URL
			if _, _, err := collect(t, context.Background(), modelFor(t, cfg, "qwen3-32b"), thinkingQuestion(tt.thinking)); err != nil {
				t.Fatal(err)
			}
			_, _, body := v.request(i)
			if body["model"] != tt.wantModel || body["enable_thinking"] != tt.wantEnable {
				t.Fatalf("model %v, enable_thinking %v", body["model"], body["enable_thinking"])
			}
		})
	}
}

// --- Anthropic through langchaingo: Messages API SSE ------------------

func anthropicEvent(w http.ResponseWriter, typ string, v map[string]any) {
	v["type"] = typ
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	w.(http.Flusher).Flush()
}

func anthropicStart(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	anthropicEvent(w, "message_start", map[string]any{"message": map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": []any{},
		"usage": map[string]any{"input_tokens": 25, "output_tokens": 1}}})
}

func anthropicBlock(w http.ResponseWriter, index int, kind, deltaType, field string, pieces ...string) {
	anthropicEvent(w, "content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": kind, field: ""}})
	for _, p := range pieces {
		anthropicEvent(w, "content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": deltaType, field: p}})
	}
	anthropicEvent(w, "content_block_stop", map[string]any{"index": index})
}

func anthropicEnd(w http.ResponseWriter) {
	anthropicEvent(w, "message_delta", map[string]any{"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 15}})
	anthropicEvent(w, "message_stop", map[string]any{})
}

func anthropicConfig(base string) Config {
	return Config{Provider: ProviderAnthropic, BaseURL: base + "/v1", APIKey: "sk-ant"}
}

func TestAnthropicMessages(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		anthropicStart(w)
		if _, asked := thinkingOf(r); asked {
			anthropicBlock(w, 0, "thinking", "thinking_delta", "thinking", "Let me ", "think.")
			anthropicBlock(w, 1, "text", "text_delta", "text", "Hel", "lo")
		} else {
			anthropicBlock(w, 0, "text", "text_delta", "text", "Hel", "lo")
		}
		anthropicEnd(w)
	})
	m := modelFor(t, anthropicConfig(v.srv.URL), "claude-sonnet-4-5")
	for i, thinking := range []bool{true, false} {
		streamThinking(t, m, thinking, "Let me think.", "Hello", service.Usage{PromptTokens: 25, CompletionTokens: 15, TotalTokens: 40})
		path, hdr, body := v.request(i)
		if path != "/v1/messages" || hdr.Get("x-api-key") != "sk-ant" || hdr.Get("anthropic-version") == "" {
			t.Fatalf("request %s %v", path, hdr)
		}
		if body["model"] != "claude-sonnet-4-5" || body["stream"] != true || body["system"] != "Be brief." {
			t.Fatalf("body %v", body)
		}
		th, _ := body["thinking"].(map[string]any)
		if !thinking {
			if th != nil {
				t.Fatalf("thinking asked for without the toggle: %v", body)
			}
			continue
		}
		// Deep thinking is Anthropic's extended thinking: a budget that
		// max_tokens exceeds, at temperature 1.
		if th["type"] != "enabled" || th["budget_tokens"] != float64(DefaultThinkingBudget) ||
			body["max_tokens"].(float64) <= float64(DefaultThinkingBudget) || body["temperature"] != float64(1) {
			t.Fatalf("thinking request %v", body)
		}
	}
}

func thinkingOf(r *http.Request) (map[string]any, bool) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body struct {
		Thinking map[string]any `json:"thinking"`
	}
	_ = json.Unmarshal(b, &body)
	return body.Thinking, body.Thinking != nil
}

// TestAnthropicFailures checks what the wrapper adds to langchaingo: the
// status code and Retry-After of a refusal, retries before the first token,
// and ragent's timeouts, which abort the upstream request.
func TestAnthropicFailures(t *testing.T) {
	t.Run("429 keeps its status and Retry-After", func(t *testing.T) {
		v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`)
		})
		cfg := anthropicConfig(v.srv.URL)
		cfg.MaxRetries = -1
		_, _, err := collect(t, context.Background(), modelFor(t, cfg, "claude-sonnet-4-5"), question)
		var se *statusError
		if !errors.Is(err, service.ErrUnavailable) || !errors.As(err, &se) || se.code != 429 || se.retryAfter != 7*time.Second || !strings.Contains(se.body, "slow down") {
			t.Fatalf("err = %v (%+v)", err, se)
		}
	})
	t.Run("529 overloaded is retried", func(t *testing.T) {
		v := newVendor(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 0 {
				w.WriteHeader(529)
				io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
				return
			}
			anthropicStart(w)
			anthropicBlock(w, 0, "text", "text_delta", "text", "ok")
			anthropicEnd(w)
		})
		deltas, _, err := collect(t, context.Background(), modelFor(t, anthropicConfig(v.srv.URL), "claude-sonnet-4-5"), question)
		if err != nil || joined(deltas, service.DeltaResponse) != "ok" || v.calls() != 2 {
			t.Fatalf("err %v, deltas %+v, %d calls", err, deltas, v.calls())
		}
	})
	t.Run("401 is not retried", func(t *testing.T) {
		v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		})
		_, _, err := collect(t, context.Background(), modelFor(t, anthropicConfig(v.srv.URL), "claude-sonnet-4-5"), question)
		var se *statusError
		if !errors.As(err, &se) || se.code != 401 || v.calls() != 1 {
			t.Fatalf("err = %v after %d calls", err, v.calls())
		}
	})
	for _, tt := range []struct {
		name, want string
		tokens     []string
	}{
		{"no first token", "no first token within 300ms", nil},
		{"silent between tokens", "no token for 300ms", []string{"Hel"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			aborted := make(chan struct{})
			v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				anthropicStart(w)
				if len(tt.tokens) > 0 {
					anthropicEvent(w, "content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
					for _, p := range tt.tokens {
						anthropicEvent(w, "content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": p}})
					}
				}
				<-r.Context().Done()
				close(aborted)
			})
			cfg := anthropicConfig(v.srv.URL)
			cfg.FirstTokenTimeout, cfg.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
			_, _, err := collect(t, context.Background(), modelFor(t, cfg, "claude-sonnet-4-5"), question)
			var te *timeoutError
			if !errors.As(err, &te) || te.msg != tt.want {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			<-aborted // the upstream request was cancelled, not left open
			if v.calls() != 1 {
				t.Fatalf("%d calls: a timeout is not retried on the same endpoint", v.calls())
			}
		})
	}
}

// --- Gemini through langchaingo: streamGenerateContent (REST) ---------

func TestGeminiStream(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		// The REST transport streams a JSON array of GenerateContentResponse,
		// one element per chunk.
		w.Header().Set("Content-Type", "application/json")
		chunk := func(text string, last bool) string {
			c := map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "index": 0}
			// Gemini sends the running usage on every chunk.
			resp := map[string]any{"candidates": []any{c}, "usageMetadata": map[string]any{"promptTokenCount": 9, "candidatesTokenCount": 1, "totalTokenCount": 10}}
			if last {
				c["finishReason"] = 1 // STOP
				resp["usageMetadata"] = map[string]any{"promptTokenCount": 9, "candidatesTokenCount": 2, "totalTokenCount": 11}
			}
			b, _ := json.Marshal(resp)
			return string(b)
		}
		for _, s := range []string{"[" + chunk("Hel", false), ",\n" + chunk("lo", true), "]"} {
			io.WriteString(w, s)
			w.(http.Flusher).Flush()
		}
	})
	cfg := Config{Provider: ProviderGoogleAI, BaseURL: v.srv.URL, APIKey: "g-key"}
	m := modelFor(t, cfg, "gemini-2.0-flash")
	deltas, usage, err := collect(t, context.Background(), m, question)
	if err != nil || joined(deltas, service.DeltaResponse) != "Hello" {
		t.Fatalf("err %v, deltas %+v", err, deltas)
	}
	// The prompt count is Gemini's, the completion count ragent's own
	// (langchaingo's Gemini SDK keeps only the first chunk's usage).
	if n := text.CountTokens("Hello"); usage != (service.Usage{PromptTokens: 9, CompletionTokens: n, TotalTokens: 9 + n}) {
		t.Fatalf("usage %+v", usage)
	}
	path, hdr, body := v.request(0)
	if !strings.HasPrefix(path, "/v1beta/models/gemini-2.0-flash:streamGenerateContent") || hdr.Get("x-goog-api-key") != "g-key" {
		t.Fatalf("request %s %v", path, hdr)
	}
	if _, ok := body["contents"]; !ok {
		t.Fatalf("body %v", body)
	}

	// langchaingo's googleai ignores the callback's error; the wrapper
	// returns it unchanged all the same.
	stop := errors.New("client went away")
	_, err = m.Stream(context.Background(), question, func(service.Delta) error { return stop })
	if err != stop {
		t.Fatalf("err = %v, want the callback's error", err)
	}
}

func TestGeminiStatus(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`)
	})
	cfg := Config{Provider: ProviderGoogleAI, BaseURL: v.srv.URL, APIKey: "g-key", MaxRetries: -1}
	_, _, err := collect(t, context.Background(), modelFor(t, cfg, "gemini-2.0-flash"), question)
	var se *statusError
	if !errors.As(err, &se) || se.code != 503 || se.retryAfter != 3*time.Second {
		t.Fatalf("err = %v", err)
	}
}

// --- Bedrock through langchaingo: InvokeModelWithResponseStream -------

// bedrockChunk writes one AWS event-stream message carrying an Anthropic
// streaming event, as Bedrock's invoke-with-response-stream does.
func bedrockChunk(t *testing.T, w http.ResponseWriter, event map[string]any) {
	inner, _ := json.Marshal(event)
	payload, _ := json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString(inner)})
	var hs eventstream.Headers
	hs.Set(":event-type", eventstream.StringValue("chunk"))
	hs.Set(":content-type", eventstream.StringValue("application/json"))
	hs.Set(":message-type", eventstream.StringValue("event"))
	if err := eventstream.NewEncoder().Encode(w, eventstream.Message{Headers: hs, Payload: payload}); err != nil {
		t.Error(err)
	}
	w.(http.Flusher).Flush()
}

func TestBedrockStream(t *testing.T) {
	const model = "anthropic.claude-3-haiku-20240307-v1:0"
	v := newVendor(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Amzn-Errortype", "ThrottlingException")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"message":"Too many requests, please wait before trying again."}`)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		bedrockChunk(t, w, map[string]any{"type": "message_start", "message": map[string]any{"usage": map[string]any{"input_tokens": 14, "output_tokens": 1}}})
		bedrockChunk(t, w, map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, p := range []string{"Hel", "lo"} {
			bedrockChunk(t, w, map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": p}})
		}
		bedrockChunk(t, w, map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": 4}})
		bedrockChunk(t, w, map[string]any{"type": "message_stop"})
	})
	cfg := Config{Provider: ProviderBedrock, BaseURL: v.srv.URL, Region: "us-east-1", APIKey: "AKIDTEST:secret", MaxRetries: -1}
	m := modelFor(t, cfg, model)
	deltas, usage, err := collect(t, context.Background(), m, question)
	if err != nil || joined(deltas, service.DeltaResponse) != "Hello" {
		t.Fatalf("err %v, deltas %+v", err, deltas)
	}
	if usage != (service.Usage{PromptTokens: 14, CompletionTokens: 4, TotalTokens: 18}) {
		t.Fatalf("usage %+v", usage)
	}
	path, hdr, body := v.request(0)
	if path != "/model/"+strings.ReplaceAll(model, ":", "%3A")+"/invoke-with-response-stream" && path != "/model/"+model+"/invoke-with-response-stream" {
		t.Fatalf("path %s", path)
	}
	// Signed with SigV4 by the AWS SDK.
	if !strings.HasPrefix(hdr.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") {
		t.Fatalf("authorization %q", hdr.Get("Authorization"))
	}
	if body["anthropic_version"] == nil || body["system"] != "Be brief." {
		t.Fatalf("body %v", body)
	}

	_, _, err = collect(t, context.Background(), m, question)
	var se *statusError
	if !errors.As(err, &se) || se.code != 429 || v.calls() != 2 {
		t.Fatalf("throttled: err = %v after %d calls (the SDK must not retry by itself)", err, v.calls())
	}
}

// TestLangchainCancelAbortsUpstream: a caller that goes away (a stop, a
// disconnect) aborts the upstream request on the langchaingo path too.
func TestLangchainCancelAbortsUpstream(t *testing.T) {
	aborted := make(chan struct{})
	v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		anthropicStart(w)
		anthropicEvent(w, "content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		anthropicEvent(w, "content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": "Hel"}})
		<-r.Context().Done()
		close(aborted)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := modelFor(t, anthropicConfig(v.srv.URL), "claude-sonnet-4-5").Stream(ctx, question, func(service.Delta) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	<-aborted
}

// panicModel is a langchaingo model whose parser blows up on what it read.
type panicModel struct{}

func (panicModel) GenerateContent(context.Context, []llms.MessageContent, ...llms.CallOption) (*llms.ContentResponse, error) {
	panic("index out of range")
}

func (panicModel) Call(context.Context, string, ...llms.CallOption) (string, error) {
	panic("index out of range")
}

func TestLangchainPanicFailsTheCall(t *testing.T) {
	m := &langchainChat{ep: Endpoint{Provider: ProviderAnthropic}, model: "m", t: timeouts{firstToken: time.Second, idle: time.Second},
		retry: newRetrier(0, buildOptions(Config{})), llm: panicModel{}}
	_, _, err := collect(t, context.Background(), m, question)
	if !errors.Is(err, service.ErrUnavailable) || !strings.Contains(err.Error(), "langchaingo anthropic panicked: index out of range") {
		t.Fatalf("err = %v", err)
	}
}
