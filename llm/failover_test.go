package llm

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ragent-go/ragent/service"
)

// failoverModels builds the answer model over a primary OpenAI-compatible
// endpoint and fallbacks, with short timeouts.
func failoverModels(t *testing.T, primary string, cooldowns Cooldowns, fallbacks ...Endpoint) (service.ChatModel, *Metrics) {
	t.Helper()
	metrics := NewMetrics(prometheus.NewRegistry())
	models, err := NewChatModels(Config{
		Provider: ProviderOpenAI, BaseURL: primary, ChatModel: "primary-model",
		Fallbacks: fallbacks, Cooldowns: cooldowns, Metrics: metrics,
		FirstTokenTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return models.Answer, metrics
}

func backup(url string) Endpoint {
	return Endpoint{Name: "backup", Provider: ProviderOpenAI, BaseURL: url, ChatModel: "backup-model"}.withDefaults()
}

func TestFailoverBeforeFirstToken(t *testing.T) {
	tests := []struct {
		name   string
		handle func(w http.ResponseWriter, r *http.Request)
	}{
		{"429", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":{"message":"rate limited"}}`, http.StatusTooManyRequests)
		}},
		{"503", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		}},
		{"hangs", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) { tt.handle(w, r) })
			second := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "from ", "backup") })
			m, metrics := failoverModels(t, first.srv.URL, nil, backup(second.srv.URL))

			req := question
			req.Model = "primary-model" // what chat sends; each endpoint answers with its own
			deltas, _, err := collect(t, context.Background(), m, req)
			if err != nil || joined(deltas, service.DeltaResponse) != "from backup" {
				t.Fatalf("err %v, deltas %+v", err, deltas)
			}
			if _, _, body := second.request(0); body["model"] != "backup-model" {
				t.Fatalf("backup asked for model %v", body["model"])
			}
			if first.calls() != 1 || second.calls() != 1 {
				t.Fatalf("calls: first %d, second %d; want 1 each (no retry on the failing endpoint)", first.calls(), second.calls())
			}
			if got := testutil.ToFloat64(metrics.calls.WithLabelValues("openai/primary-model", "failover")); got != 1 {
				t.Fatalf("failover count %v", got)
			}
			if got := testutil.ToFloat64(metrics.calls.WithLabelValues("backup", "ok")); got != 1 {
				t.Fatalf("backup ok count %v", got)
			}

			// The failed endpoint cools down: the next call goes straight to
			// the backup.
			if _, _, err := collect(t, context.Background(), m, question); err != nil {
				t.Fatal(err)
			}
			if first.calls() != 1 || second.calls() != 2 {
				t.Fatalf("after the cooldown began: first %d calls, second %d", first.calls(), second.calls())
			}
			if got := testutil.ToFloat64(metrics.skipped.WithLabelValues("openai/primary-model")); got != 1 {
				t.Fatalf("skip count %v", got)
			}
		})
	}
}

func TestFailoverNeverAfterFirstToken(t *testing.T) {
	first := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		startSSE(w)
		sse(w, delta("content", "Hel"))
		// The connection drops mid-answer.
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	second := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "Hello") })
	m, metrics := failoverModels(t, first.srv.URL, nil, backup(second.srv.URL))
	deltas, _, err := collect(t, context.Background(), m, question)
	if !errors.Is(err, service.ErrUnavailable) || joined(deltas, service.DeltaResponse) != "Hel" {
		t.Fatalf("err %v, deltas %+v", err, deltas)
	}
	if second.calls() != 0 {
		t.Fatalf("the backup was called after a token reached the user")
	}
	if got := testutil.ToFloat64(metrics.calls.WithLabelValues("openai/primary-model", "error")); got != 1 {
		t.Fatalf("error count %v", got)
	}
}

func TestFailoverNotOnRefusal(t *testing.T) {
	first := newVendor(t, failWith(http.StatusBadRequest, `{"error":{"message":"messages: too long"}}`))
	second := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "Hello") })
	m, _ := failoverModels(t, first.srv.URL, nil, backup(second.srv.URL))
	if _, _, err := collect(t, context.Background(), m, question); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("err = %v, want the 400", err)
	}
	if second.calls() != 0 {
		t.Fatal("a 400 failed over: another endpoint would refuse the same request")
	}
}

func TestFailoverAcrossProviders(t *testing.T) {
	// An Anthropic primary (through langchaingo) overloaded, an
	// OpenAI-compatible backup; the cooldown follows Retry-After.
	first := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(529)
		w.Write([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	})
	second := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "ok") })
	cooldowns := newLocalCooldowns(time.Now)
	models, err := NewChatModels(Config{
		Provider: ProviderAnthropic, BaseURL: first.srv.URL + "/v1", APIKey: "sk-ant", ChatModel: "claude-sonnet-4-5",
		Fallbacks: []Endpoint{backup(second.srv.URL)}, Cooldowns: cooldowns,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []service.ChatModel{models.Fast, models.Answer} {
		deltas, _, err := collect(t, context.Background(), m, question)
		if err != nil || joined(deltas, service.DeltaResponse) != "ok" {
			t.Fatalf("err %v, deltas %+v", err, deltas)
		}
	}
	// The fast and answer chains share the endpoint's cooldown.
	if first.calls() != 1 || second.calls() != 2 {
		t.Fatalf("calls: first %d, second %d", first.calls(), second.calls())
	}
	if d, _ := cooldowns.CoolingFor(context.Background(), "anthropic/claude-sonnet-4-5"); d < 110*time.Second || d > 120*time.Second {
		t.Fatalf("cooling for %v, want Retry-After's 120s", d)
	}
}

func TestFailoverAllCoolingStillTries(t *testing.T) {
	first := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "first") })
	second := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) { streamAnswer(w, "second") })
	cooldowns := newLocalCooldowns(time.Now)
	ctx := context.Background()
	cooldowns.Cool(ctx, "openai/primary-model", time.Minute)
	cooldowns.Cool(ctx, "backup", time.Minute)
	m, _ := failoverModels(t, first.srv.URL, cooldowns, backup(second.srv.URL))
	// A cooldown reorders the list; it never refuses a call outright.
	deltas, _, err := collect(t, ctx, m, question)
	if err != nil || joined(deltas, service.DeltaResponse) != "first" {
		t.Fatalf("err %v, deltas %+v", err, deltas)
	}
}

func TestLoadFallbacks(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/fallbacks.json"
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"CLAUDE_KEY": "sk-ant-from-env"}
	write(`[{"provider":"anthropic","chatModel":"claude-sonnet-4-5","apiKeyEnv":"CLAUDE_KEY","thinkingBudget":4096},
	        {"name":"az","provider":"azure","baseURL":"https://x.openai.azure.com","apiKey":"k","chatModel":"gpt-4o","fastModel":"gpt-4o-mini"}]`)
	eps, err := LoadFallbacks(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || eps[0].Name != "anthropic/claude-sonnet-4-5" || eps[0].APIKey != "sk-ant-from-env" || eps[0].FastModel != "claude-sonnet-4-5" ||
		eps[0].ThinkingBudget != 4096 || eps[1].APIVersion != DefaultAzureAPIVersion || eps[1].FastModel != "gpt-4o-mini" {
		t.Fatalf("endpoints %+v", eps)
	}
	for _, bad := range []string{
		`[{"provider":"gpt","chatModel":"x"}]`,
		`[{"provider":"openai"}]`,
		`[{"provider":"openai","chatModel":"x","colour":"blue"}]`,
		`[{"provider":"openai","chatModel":"x","thinking":"always"}]`,
		`[{"provider":"bedrock","chatModel":"x"}]`,
		`[{"name":"a","provider":"openai","chatModel":"x"},{"name":"a","provider":"openai","chatModel":"y"}]`,
		`{"provider":"openai"}`,
	} {
		write(bad)
		if _, err := LoadFallbacks(path, func(string) string { return "" }); !errors.Is(err, service.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", bad, err)
		}
	}
}
