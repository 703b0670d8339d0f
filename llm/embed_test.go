package llm

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// fakeEmbedServer mimics /embeddings (OpenAI) and /api/embed (Ollama). The
// vector of a text "t<k>" is [k, 1, 0, ...] of length dim, so order can be
// checked; reply may override the answer of the n-th call.
type fakeEmbedServer struct {
	srv      *httptest.Server
	dim      atomic.Int32
	calls    atomic.Int32
	inFlight atomic.Int32
	peak     atomic.Int32
	delay    time.Duration
	reply    func(n int, w http.ResponseWriter) bool // true when it answered

	mu       sync.Mutex
	paths    []string
	sizes    []int
	arrivals []time.Time
}

func newFakeEmbedServer(t *testing.T, dim int) *fakeEmbedServer {
	t.Helper()
	f := &fakeEmbedServer{}
	f.dim.Store(int32(dim))
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEmbedServer) serve(w http.ResponseWriter, r *http.Request) {
	n := int(f.calls.Add(1)) - 1
	cur := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peak.Load()
		if cur <= p || f.peak.CompareAndSwap(p, cur) {
			break
		}
	}
	var req struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	f.sizes = append(f.sizes, len(req.Input))
	f.arrivals = append(f.arrivals, time.Now())
	f.mu.Unlock()
	select {
	case <-time.After(f.delay):
	case <-r.Context().Done():
		return
	}
	if f.reply != nil && f.reply(n, w) {
		return
	}
	vecs := make([][]float32, len(req.Input))
	for i, s := range req.Input {
		k, _ := strconv.Atoi(strings.TrimPrefix(s, "t"))
		vecs[i] = make([]float32, f.dim.Load())
		vecs[i][0], vecs[i][1] = float32(k), 1
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/api/embed" {
		_ = json.NewEncoder(w).Encode(map[string]any{"model": req.Model, "embeddings": vecs})
		return
	}
	// Answer out of order: clients must place vectors by index.
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	items := make([]item, len(vecs))
	for i, v := range vecs {
		items[i] = item{"embedding", i, v}
	}
	rand.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": items, "model": req.Model})
}

func inputs(n int) []string {
	texts := make([]string, n)
	for i := range texts {
		texts[i] = "t" + strconv.Itoa(i)
	}
	return texts
}

func embedderFor(t *testing.T, cfg Config) service.Embedder {
	t.Helper()
	e, err := NewEmbedder(cfg, WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func checkOrder(t *testing.T, vecs [][]float32, n, dim int) {
	t.Helper()
	if len(vecs) != n {
		t.Fatalf("%d vectors for %d texts", len(vecs), n)
	}
	for i, v := range vecs {
		if len(v) != dim || v[0] != float32(i) {
			t.Fatalf("vector %d: len %d, first %v", i, len(v), v[0])
		}
	}
}

func TestEmbedBatchesInOrder(t *testing.T) {
	tests := []struct {
		provider string
		path     string
	}{
		{ProviderOpenAI, "/embeddings"},
		{ProviderOllama, "/api/embed"},
	}
	for _, tt := range tests {
		t.Run(tt.provider, func(t *testing.T) {
			f := newFakeEmbedServer(t, 8)
			f.delay = 30 * time.Millisecond
			e := embedderFor(t, Config{
				EmbeddingProvider: tt.provider, EmbeddingBaseURL: f.srv.URL, EmbeddingModel: "emb",
				EmbeddingDim: 8, EmbeddingConcurrency: 2,
			})
			vecs, err := e.Embed(context.Background(), service.EmbedDocument, inputs(100))
			if err != nil {
				t.Fatal(err)
			}
			checkOrder(t, vecs, 100, 8)
			if got := f.calls.Load(); got != 4 { // ceil(100/32)
				t.Fatalf("%d calls, want 4", got)
			}
			sizes := map[int]int{}
			for i, s := range f.sizes {
				sizes[s]++
				if f.paths[i] != tt.path {
					t.Fatalf("path %s, want %s", f.paths[i], tt.path)
				}
			}
			if sizes[32] != 3 || sizes[4] != 1 {
				t.Fatalf("batch sizes %v, want three of 32 and one of 4", f.sizes)
			}
			if p := f.peak.Load(); p > 2 {
				t.Fatalf("%d calls in flight, concurrency is 2", p)
			}
			if e.Model() != "emb" || e.Dim() != 8 {
				t.Fatalf("model %q dim %d", e.Model(), e.Dim())
			}
		})
	}
}

func TestEmbedRetryAfter(t *testing.T) {
	f := newFakeEmbedServer(t, 4)
	f.reply = func(n int, w http.ResponseWriter) bool {
		if n > 0 {
			return false
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return true
	}
	e := embedderFor(t, Config{EmbeddingProvider: ProviderOpenAI, EmbeddingBaseURL: f.srv.URL, EmbeddingModel: "emb", EmbeddingDim: 4})
	vecs, err := e.Embed(context.Background(), service.EmbedDocument, inputs(3))
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, vecs, 3, 4)
	if waited := f.arrivals[1].Sub(f.arrivals[0]); waited < time.Second || waited > 2*time.Second {
		t.Fatalf("waited %v between attempts, want Retry-After's 1s", waited)
	}
}

func TestEmbedFailures(t *testing.T) {
	tests := []struct {
		name      string
		cfgDim    int
		serverDim int
		reply     func(n int, w http.ResponseWriter) bool
		wantErr   string
		wantCalls int32
	}{
		{
			name:      "dimension differs from the configured one",
			cfgDim:    8,
			serverDim: 4,
			wantErr:   "returned 4 dimensions but the configured dimension (RAGENT_EMBEDDING_DIM) is 8",
			wantCalls: 1,
		},
		{
			name:      "server errors exhaust the retries",
			cfgDim:    4,
			serverDim: 4,
			reply: func(_ int, w http.ResponseWriter) bool {
				http.Error(w, "down", http.StatusBadGateway)
				return true
			},
			wantErr:   "after 2 retries: upstream status 502: down",
			wantCalls: 3,
		},
		{
			name:      "a malformed answer is not retried",
			cfgDim:    4,
			serverDim: 4,
			reply: func(_ int, w http.ResponseWriter) bool {
				_, _ = w.Write([]byte(`{"data": "nope"}`))
				return true
			},
			wantErr:   "malformed response",
			wantCalls: 1,
		},
		{
			name:      "too few vectors",
			cfgDim:    4,
			serverDim: 4,
			reply: func(_ int, w http.ResponseWriter) bool {
				_, _ = w.Write([]byte(`{"data": [{"index": 0, "embedding": [1, 0, 0, 0]}]}`))
				return true
			},
			wantErr:   "1 vectors for 3 inputs",
			wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEmbedServer(t, tt.serverDim)
			f.reply = tt.reply
			e := embedderFor(t, Config{
				EmbeddingProvider: ProviderOpenAI, EmbeddingBaseURL: f.srv.URL, EmbeddingModel: "emb",
				EmbeddingDim: tt.cfgDim, MaxRetries: 2,
			})
			_, err := e.Embed(context.Background(), service.EmbedDocument, inputs(3))
			if !errors.Is(err, service.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrUnavailable containing %q", err, tt.wantErr)
			}
			if got := f.calls.Load(); got != tt.wantCalls {
				t.Fatalf("%d calls, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestEmbedAdoptsDimension(t *testing.T) {
	f := newFakeEmbedServer(t, 6)
	e := embedderFor(t, Config{EmbeddingProvider: ProviderOpenAI, EmbeddingBaseURL: f.srv.URL, EmbeddingModel: "emb"})
	if e.Dim() != 0 {
		t.Fatalf("dim %d before any call, want 0 (unknown)", e.Dim())
	}
	vecs, err := e.Embed(context.Background(), service.EmbedDocument, inputs(2))
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, vecs, 2, 6)
	if e.Dim() != 6 {
		t.Fatalf("dim %d, want the adopted 6", e.Dim())
	}
	f.dim.Store(7) // the model behind the endpoint changed
	if _, err := e.Embed(context.Background(), service.EmbedDocument, inputs(2)); err == nil || !strings.Contains(err.Error(), "returned 7 dimensions after returning 6") {
		t.Fatalf("err = %v, want a dimension change error", err)
	}
}

func TestEmbedCancelled(t *testing.T) {
	f := newFakeEmbedServer(t, 4)
	f.delay = 2 * time.Second
	e := embedderFor(t, Config{EmbeddingProvider: ProviderOpenAI, EmbeddingBaseURL: f.srv.URL, EmbeddingModel: "emb", EmbeddingDim: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := e.Embed(ctx, service.EmbedDocument, inputs(3)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("returned %v after the deadline", d)
	}
}

func TestEmbedderDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr error
	}{
		{name: "offline by default", cfg: Config{}},
		{name: "remote needs a model", cfg: Config{EmbeddingProvider: ProviderOpenAI}, wantErr: service.ErrInvalid},
		{name: "unknown provider", cfg: Config{EmbeddingProvider: "word2vec"}, wantErr: service.ErrInvalid},
		{name: "negative dimension", cfg: Config{EmbeddingDim: -1}, wantErr: service.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewEmbedder(tt.cfg)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestEmbeddingEndpointDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantURL string
		wantKey string
	}{
		{
			name:    "same vendor as chat",
			cfg:     Config{Provider: ProviderOpenAI, BaseURL: "https://api.example.com/v1", APIKey: "k", EmbeddingProvider: ProviderOpenAI},
			wantURL: "https://api.example.com/v1", wantKey: "k",
		},
		{
			name:    "another vendor",
			cfg:     Config{Provider: ProviderOpenAI, BaseURL: "https://api.example.com/v1", APIKey: "k", EmbeddingProvider: ProviderOllama},
			wantURL: "http://127.0.0.1:11434", wantKey: "",
		},
		{
			name:    "explicit",
			cfg:     Config{EmbeddingProvider: ProviderOpenAI, EmbeddingBaseURL: "http://e", EmbeddingAPIKey: "ek"},
			wantURL: "http://e", wantKey: "ek",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg.withDefaults()
			if c.EmbeddingBaseURL != tt.wantURL || c.EmbeddingAPIKey != tt.wantKey {
				t.Fatalf("url %q key %q, want %q %q", c.EmbeddingBaseURL, c.EmbeddingAPIKey, tt.wantURL, tt.wantKey)
			}
		})
	}
}
