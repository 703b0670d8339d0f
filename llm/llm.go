// Package llm adapts language-model providers to ragent's domain interfaces
// service.ChatModel and service.Embedder, plus an optional Reranker.
//
// Three providers exist, chosen by Config.Provider (chat) and
// Config.EmbeddingProvider (embeddings):
//
//   - "offline" needs no network: an extractive chat model that quotes the
//     best sentences of the sources it is given with [n] citations, and a
//     feature-hashing embedder. It is the default so that ragent runs on a
//     laptop with nothing else installed.
//   - "openai" speaks the OpenAI-compatible HTTP API (OpenAI, DeepSeek,
//     DashScope/Bailian, vLLM, Ollama's /v1 …): streaming
//     /chat/completions and /embeddings.
//   - "ollama" uses Ollama's OpenAI-compatible /v1 endpoint for chat and its
//     native /api/embed for embeddings.
//
// The HTTP clients are written by hand rather than through langchaingo's
// openai package, which DESIGN §9 suggests. langchaingo (v0.1.14) turns a
// non-200 answer into a plain string error, so the status code and the
// Retry-After header are lost and the retry policy of DESIGN §11 (retry 429
// and 5xx before the first token, honouring Retry-After) cannot be built on
// it; it also offers no hook for first-token and between-token timeouts.
//
// A remote embedder passes each HTTP call through an optional Gate
// (WithGate), which cmd/ragent backs with the cluster-wide embedding limit,
// and tells it of every Retry-After the provider sends. The
// streaming protocol is small (server-sent events of JSON chunks), so owning
// it costs about two hundred lines and gives exact control over retries,
// timeouts, reasoning deltas and usage.
package llm

import (
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Provider names accepted by Config.Provider and Config.EmbeddingProvider.
const (
	ProviderOffline = "offline"
	ProviderOpenAI  = "openai"
	ProviderOllama  = "ollama"
)

// Defaults applied to zero Config fields.
const (
	DefaultEmbeddingDim         = 512
	DefaultFirstTokenTimeout    = 60 * time.Second
	DefaultIdleTimeout          = 60 * time.Second
	DefaultRequestTimeout       = 60 * time.Second
	DefaultMaxRetries           = 3
	DefaultEmbeddingBatchSize   = 32
	DefaultEmbeddingConcurrency = 4

	defaultOpenAIBaseURL = "https://api.openai.com/v1"
	defaultOllamaBaseURL = "http://127.0.0.1:11434"
)

// Config selects and tunes the providers. Zero values mean the defaults
// above; it mirrors the RAGENT_LLM_* and RAGENT_EMBEDDING_* settings.
type Config struct {
	Provider  string // "offline" (default), "openai" or "ollama"
	BaseURL   string // e.g. https://api.deepseek.com/v1; Ollama: http://host:11434
	APIKey    string
	ChatModel string // the answer model
	FastModel string // the model for rewrite, intent and title

	// EmbeddingBaseURL and EmbeddingAPIKey default to BaseURL and APIKey
	// when the embedding provider is the chat provider (one vendor for
	// both is the common case); otherwise to the provider's default URL.
	EmbeddingProvider string
	EmbeddingModel    string
	EmbeddingBaseURL  string
	EmbeddingAPIKey   string
	// EmbeddingDim is the vector dimension. The offline embedder produces
	// it (default 512). A remote embedder checks every answer against it
	// and fails on a mismatch, since vectors of another dimension cannot
	// join a knowledge base's index; when it is 0 the remote embedder
	// adopts the dimension of its first answer.
	EmbeddingDim int

	FirstTokenTimeout time.Duration // from sending a chat request to its first token
	IdleTimeout       time.Duration // between two tokens of a chat stream
	RequestTimeout    time.Duration // one embedding or rerank HTTP call
	// MaxRetries bounds retries of 429, 5xx and connection errors; a
	// negative value disables them.
	MaxRetries int

	EmbeddingBatchSize   int // texts per /embeddings call
	EmbeddingConcurrency int // embedding calls in flight per Embed (a Gate bounds them across calls and instances)
}

func (c Config) withDefaults() Config {
	if c.Provider == "" {
		c.Provider = ProviderOffline
	}
	if c.EmbeddingProvider == "" {
		c.EmbeddingProvider = ProviderOffline
	}
	if c.BaseURL == "" {
		c.BaseURL = defaultBaseURL(c.Provider)
	}
	if c.EmbeddingBaseURL == "" {
		if c.EmbeddingProvider == c.Provider {
			c.EmbeddingBaseURL = c.BaseURL
		} else {
			c.EmbeddingBaseURL = defaultBaseURL(c.EmbeddingProvider)
		}
	}
	if c.EmbeddingAPIKey == "" && c.EmbeddingProvider == c.Provider {
		c.EmbeddingAPIKey = c.APIKey
	}
	if c.EmbeddingDim == 0 && c.EmbeddingProvider == ProviderOffline {
		c.EmbeddingDim = DefaultEmbeddingDim
	}
	if c.FirstTokenTimeout <= 0 {
		c.FirstTokenTimeout = DefaultFirstTokenTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = DefaultMaxRetries
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.EmbeddingBatchSize <= 0 {
		c.EmbeddingBatchSize = DefaultEmbeddingBatchSize
	}
	if c.EmbeddingConcurrency <= 0 {
		c.EmbeddingConcurrency = DefaultEmbeddingConcurrency
	}
	return c
}

func defaultBaseURL(provider string) string {
	switch provider {
	case ProviderOpenAI:
		return defaultOpenAIBaseURL
	case ProviderOllama:
		return defaultOllamaBaseURL
	}
	return ""
}

// Option tunes a constructor beyond Config: things a test or a demo sets,
// not an operator.
type Option func(*options)

type options struct {
	client      *http.Client
	streamDelay time.Duration
	backoffBase time.Duration
	backoffMax  time.Duration
	gate        Gate
}

// WithStreamDelay makes the offline chat model pause between deltas so that
// a demo shows the answer arriving. The default is no pause.
func WithStreamDelay(d time.Duration) Option {
	return func(o *options) { o.streamDelay = d }
}

// WithBackoff sets the first retry delay and the cap of the exponential
// backoff (defaults 500 ms and 10 s). A Retry-After header overrides it.
func WithBackoff(base, maxDelay time.Duration) Option {
	return func(o *options) { o.backoffBase, o.backoffMax = base, maxDelay }
}

func buildOptions(opts []Option) options {
	o := options{
		backoffBase: 500 * time.Millisecond,
		backoffMax:  10 * time.Second,
		client:      newHTTPClient(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// newHTTPClient bounds every phase of a call except reading the body, which
// for a chat stream may last minutes; the stream's own timeouts cover that.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// NewChatModel returns the chat model of cfg.Provider that answers with
// model (usually cfg.ChatModel or cfg.FastModel; a ChatRequest.Model
// overrides it per call). The offline model ignores the name.
func NewChatModel(cfg Config, model string, opts ...Option) (service.ChatModel, error) {
	cfg = cfg.withDefaults()
	o := buildOptions(opts)
	switch cfg.Provider {
	case ProviderOffline:
		return &offlineChat{delay: o.streamDelay}, nil
	case ProviderOpenAI, ProviderOllama:
		if model == "" {
			return nil, service.Errorf(service.ErrInvalid, "llm: provider %s needs a chat model name", cfg.Provider)
		}
		base := strings.TrimRight(cfg.BaseURL, "/")
		if cfg.Provider == ProviderOllama {
			base = ollamaOpenAIBase(base)
		}
		return &openAIChat{
			baseURL: base,
			apiKey:  cfg.APIKey,
			model:   model,
			cfg:     cfg,
			http:    o.client,
			retry:   newRetrier(cfg.MaxRetries, o),
		}, nil
	}
	return nil, service.Errorf(service.ErrInvalid, "llm: unknown provider %q", cfg.Provider)
}

// NewEmbedder returns the embedder of cfg.EmbeddingProvider.
func NewEmbedder(cfg Config, opts ...Option) (service.Embedder, error) {
	cfg = cfg.withDefaults()
	if cfg.EmbeddingDim < 0 {
		return nil, service.Errorf(service.ErrInvalid, "llm: embedding dimension %d is negative", cfg.EmbeddingDim)
	}
	switch cfg.EmbeddingProvider {
	case ProviderOffline:
		return newOfflineEmbedder(cfg.EmbeddingDim), nil
	case ProviderOpenAI, ProviderOllama:
		if cfg.EmbeddingModel == "" {
			return nil, service.Errorf(service.ErrInvalid, "llm: embedding provider %s needs a model name", cfg.EmbeddingProvider)
		}
		o := buildOptions(opts)
		return newRemoteEmbedder(cfg, o), nil
	}
	return nil, service.Errorf(service.ErrInvalid, "llm: unknown embedding provider %q", cfg.EmbeddingProvider)
}

// ollamaOpenAIBase turns an Ollama server URL into its OpenAI-compatible
// base; a URL already ending in /v1 is kept.
func ollamaOpenAIBase(base string) string {
	if strings.HasSuffix(base, "/v1") {
		return base
	}
	return base + "/v1"
}

// ollamaNativeBase is the inverse: Ollama's own API lives beside /v1.
func ollamaNativeBase(base string) string {
	return strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
}
