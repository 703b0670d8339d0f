// Package llm adapts language-model providers to ragent's domain interfaces
// service.ChatModel and service.Embedder, plus an optional Reranker, and
// chains several model endpoints with failover (failover.go).
//
// Providers are chosen by Config.Provider (chat) and Config.EmbeddingProvider
// (embeddings); docs/model-providers.md "Model providers" lists them and why each takes its
// path:
//
//   - "offline" needs no network: an extractive chat model that quotes the
//     best sentences of the sources it is given with [n] citations, and a
//     feature-hashing embedder. It is the default so that ragent runs on a
//     laptop with nothing else installed.
//   - ragent's own HTTP client (openai.go, ollama.go) for the wire formats
//     it speaks better than langchaingo v0.1.14: "openai" (any
//     OpenAI-compatible server), "azure" (deployment URLs and the api-key
//     header), "mistral" and "ollama" (native /api/chat NDJSON). It keeps
//     the status code and Retry-After of a failure, enforces first-token and
//     between-token timeouts, streams reasoning deltas, reads lines up to
//     4 MiB and asks for thinking with each vendor's own parameter.
//   - langchaingo (langchain.go) for vendors with their own protocol:
//     "anthropic" (Messages SSE), "googleai" (Gemini streamGenerateContent)
//     and "bedrock" (InvokeModelWithResponseStream). ragent wraps it: an
//     http.RoundTripper under it records each answer's status and
//     Retry-After (langchaingo turns them into strings), and ragent's own
//     watchdog around the streaming callback enforces the timeouts.
//
// A remote embedder passes each HTTP call through an optional Gate
// (Config.EmbeddingGate), which cmd/ragent backs with the cluster-wide
// embedding limit, and tells it of every Retry-After the provider sends.
package llm

import (
	"cmp"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Provider names accepted by Config.Provider, Endpoint.Provider and
// Config.EmbeddingProvider.
const (
	ProviderOffline   = "offline"
	ProviderOpenAI    = "openai"
	ProviderAzure     = "azure"
	ProviderMistral   = "mistral"
	ProviderOllama    = "ollama"
	ProviderAnthropic = "anthropic"
	ProviderGoogleAI  = "googleai"
	ProviderBedrock   = "bedrock"
)

// How a deep-thinking request asks the model to think (Config.Thinking).
const (
	// ThinkingAuto uses the provider's own parameter where it has one:
	// Anthropic's thinking budget, Ollama's think flag. OpenAI-compatible
	// servers get nothing (OpenAI itself refuses unknown fields).
	ThinkingAuto = "auto"
	// ThinkingEnable sends "enable_thinking": true|false on every
	// OpenAI-compatible request (Qwen3 on DashScope/Bailian).
	ThinkingEnable = "enable_thinking"
	// ThinkingOff never asks; the toggle only shows or hides the reasoning
	// a model sends anyway.
	ThinkingOff = "off"
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
	DefaultThinkingBudget       = 2048
	DefaultCooldown             = 30 * time.Second
	DefaultAzureAPIVersion      = "2024-10-21"

	defaultOpenAIBaseURL  = "https://api.openai.com/v1"
	defaultOllamaBaseURL  = "http://127.0.0.1:11434"
	defaultMistralBaseURL = "https://api.mistral.ai/v1"
)

// Config selects and tunes the providers. Zero values mean the defaults
// above; it mirrors the RAGENT_LLM_* and RAGENT_EMBEDDING_* settings. The
// fields from Provider to ThinkingBudget describe the primary endpoint;
// Fallbacks lists the endpoints tried after it.
type Config struct {
	Provider   string // see the Provider constants; "offline" by default
	BaseURL    string // e.g. https://api.deepseek.com/v1; Ollama: http://host:11434; Azure: https://NAME.openai.azure.com
	APIKey     string // Bedrock: ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]
	APIVersion string // Azure's api-version
	Region     string // Bedrock's AWS region
	ChatModel  string // the answer model (an Azure deployment name)
	FastModel  string // the model for rewrite, intent and title

	Thinking       string // ThinkingAuto (default), ThinkingEnable or ThinkingOff
	ThinkingModel  string // answers deep-thinking requests instead of ChatModel
	ThinkingBudget int    // tokens a thinking budget grants (Anthropic)

	// Fallbacks are tried in order when an earlier endpoint fails before
	// its first token (429, 5xx, a connection error, a timeout).
	Fallbacks []Endpoint
	// Budgets, when set, returns the budget of the endpoint named name (nil
	// for none): its calls wait for room in it, and its 429s are absorbed
	// (budget.go). AnswerReservation is what a call naming no max_tokens
	// reserves for its answer (default DefaultAnswerReservation); BudgetWait
	// bounds how long 429s may keep a call waiting (default 15 s).
	Budgets           func(name string) Budget
	AnswerReservation int
	BudgetWait        time.Duration
	// RerankBudget, when set, is the reranker's budget: every rerank call
	// waits for room in it, and its 429s are absorbed as chat's are.
	RerankBudget Budget
	// Cooldown is how long an endpoint that failed so is skipped when it
	// sent no Retry-After.
	Cooldown time.Duration
	// Cooldowns shares the endpoints' cooldowns between instances (Redis);
	// nil keeps them in this process.
	Cooldowns Cooldowns
	// Metrics counts calls per endpoint; nil counts nothing.
	Metrics *Metrics
	// EmbedMetrics counts embedding calls; nil counts nothing.
	EmbedMetrics *EmbedMetrics

	// EmbeddingBaseURL and EmbeddingAPIKey default to BaseURL and APIKey
	// when the embedding provider is the chat provider (one vendor for
	// both is the common case); otherwise to the provider's default URL.
	EmbeddingProvider string
	EmbeddingModel    string
	EmbeddingBaseURL  string
	EmbeddingAPIKey   string
	// EmbeddingQueryBaseURL, when set, embeds questions (service.EmbedQuery)
	// there instead of at EmbeddingBaseURL: the same model served by a
	// second process, so that a search's embedding does not wait behind
	// document batches (openai and ollama providers).
	EmbeddingQueryBaseURL string
	// EmbeddingDim is the vector dimension. The offline embedder produces
	// it (default 512). A remote embedder checks every answer against it
	// and fails on a mismatch, since vectors of another dimension cannot
	// join a knowledge base's index; when it is 0 the remote embedder
	// adopts the dimension of its first answer.
	EmbeddingDim int
	// EmbeddingKinds tells questions from passages for asymmetric models;
	// zero: DefaultEmbedKinds of the model.
	EmbeddingKinds EmbedKinds

	FirstTokenTimeout time.Duration // from sending a chat request to its first token
	IdleTimeout       time.Duration // between two tokens of a chat stream
	RequestTimeout    time.Duration // one embedding or rerank HTTP call
	// MaxRetries bounds retries of 429, 5xx and connection errors on one
	// endpoint; a negative value disables them. With fallbacks an endpoint
	// is not retried: the next one is tried instead.
	MaxRetries int

	EmbeddingBatchSize   int // texts per /embeddings call (default 32)
	EmbeddingConcurrency int // embedding calls in flight per Embed (a Gate bounds them across calls and instances)
	// EmbeddingGate, when set, admits every embedding HTTP call (cmd/ragent
	// backs it with the cluster-wide embedding limit).
	EmbeddingGate Gate

	// HTTPClient carries every provider call; nil: a client whose phases
	// are bounded except reading the body (a stream may last minutes).
	HTTPClient *http.Client
	// StreamDelay makes the offline chat model pause between deltas so that
	// a demo shows the answer arriving.
	StreamDelay time.Duration
	// BackoffBase and BackoffMax shape the exponential backoff between
	// retries (defaults 500 ms and 10 s); a Retry-After overrides it.
	BackoffBase, BackoffMax time.Duration
	Logger                  *slog.Logger
	Now                     func() time.Time
}

func (c Config) withDefaults() Config {
	c.Provider = cmp.Or(c.Provider, ProviderOffline)
	c.EmbeddingProvider = cmp.Or(c.EmbeddingProvider, ProviderOffline)
	c.BaseURL = cmp.Or(c.BaseURL, defaultBaseURL(c.Provider))
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
	positiveOr(&c.FirstTokenTimeout, DefaultFirstTokenTimeout)
	positiveOr(&c.IdleTimeout, DefaultIdleTimeout)
	positiveOr(&c.RequestTimeout, DefaultRequestTimeout)
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = DefaultMaxRetries
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	positiveOr(&c.EmbeddingBatchSize, DefaultEmbeddingBatchSize)
	positiveOr(&c.EmbeddingConcurrency, DefaultEmbeddingConcurrency)
	positiveOr(&c.Cooldown, DefaultCooldown)
	positiveOr(&c.AnswerReservation, DefaultAnswerReservation)
	positiveOr(&c.BudgetWait, 15*time.Second)
	positiveOr(&c.BackoffBase, 500*time.Millisecond)
	positiveOr(&c.BackoffMax, 10*time.Second)
	if c.HTTPClient == nil {
		c.HTTPClient = newHTTPClient()
	}
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// positiveOr sets *v to def unless *v is positive: zero and negative
// settings take the default.
func positiveOr[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func defaultBaseURL(provider string) string {
	switch provider {
	case ProviderOpenAI:
		return defaultOpenAIBaseURL
	case ProviderOllama:
		return defaultOllamaBaseURL
	case ProviderMistral:
		return defaultMistralBaseURL
	}
	return ""
}

// options is what the HTTP clients take from Config.
type options struct {
	client      *http.Client
	backoffBase time.Duration
	backoffMax  time.Duration
	now         func() time.Time
	gate        Gate
}

func buildOptions(cfg Config) options {
	cfg = cfg.withDefaults()
	return options{client: cfg.HTTPClient, backoffBase: cfg.BackoffBase, backoffMax: cfg.BackoffMax, now: cfg.Now, gate: cfg.EmbeddingGate}
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

// NewChatModel returns a chat model of the primary endpoint (cfg.Provider)
// that answers with model (a ChatRequest.Model overrides it per call),
// without failover. The offline model ignores the name.
func NewChatModel(cfg Config, model string) (service.ChatModel, error) {
	cfg = cfg.withDefaults()
	if cfg.Provider == ProviderOffline {
		return &offlineChat{delay: cfg.StreamDelay}, nil
	}
	ep := cfg.primary()
	ep.ChatModel = model
	return newEndpointChat(cfg, ep, model, cfg.MaxRetries)
}

// newEndpointChat builds the chat model of one endpoint answering with
// model, retrying a failure before the first token up to retries times.
func newEndpointChat(cfg Config, ep Endpoint, model string, retries int) (service.ChatModel, error) {
	if model == "" {
		return nil, service.Errorf(service.ErrInvalid, "llm: provider %s needs a chat model name", ep.Provider)
	}
	o := buildOptions(cfg)
	t := timeouts{firstToken: cfg.FirstTokenTimeout, idle: cfg.IdleTimeout}
	retry := newRetrier(retries, o)
	switch ep.Provider {
	case ProviderOpenAI, ProviderAzure, ProviderMistral, ProviderOllama:
		return newHTTPChat(ep, model, t, o.client, retry), nil
	case ProviderAnthropic, ProviderGoogleAI, ProviderBedrock:
		return newLangchainChat(ep, model, t, o.client, retry)
	}
	return nil, service.Errorf(service.ErrInvalid, "llm: unknown provider %q", ep.Provider)
}

// NewEmbedder returns the embedder of cfg.EmbeddingProvider.
func NewEmbedder(cfg Config) (service.Embedder, error) {
	e, err := newEmbedder(cfg)
	if err != nil || cfg.EmbedMetrics == nil {
		return e, err
	}
	return measuredEmbedder{Embedder: e, m: cfg.EmbedMetrics}, nil
}

func newEmbedder(cfg Config) (service.Embedder, error) {
	cfg = cfg.withDefaults()
	if cfg.EmbeddingDim < 0 {
		return nil, service.Errorf(service.ErrInvalid, "llm: embedding dimension %d is negative", cfg.EmbeddingDim)
	}
	switch cfg.EmbeddingProvider {
	case ProviderOffline:
		return newOfflineEmbedder(cfg.EmbeddingDim), nil
	case ProviderOpenAI, ProviderOllama, ProviderMistral:
		if cfg.EmbeddingModel == "" {
			return nil, service.Errorf(service.ErrInvalid, "llm: embedding provider %s needs a model name", cfg.EmbeddingProvider)
		}
		return newRemoteEmbedder(cfg, buildOptions(cfg)), nil
	case ProviderGoogleAI, ProviderBedrock:
		if cfg.EmbeddingModel == "" {
			return nil, service.Errorf(service.ErrInvalid, "llm: embedding provider %s needs a model name", cfg.EmbeddingProvider)
		}
		return newLangchainEmbedder(cfg)
	}
	return nil, service.Errorf(service.ErrInvalid, "llm: unknown embedding provider %q", cfg.EmbeddingProvider)
}

// ollamaNativeBase strips an OpenAI-compatible /v1 suffix: Ollama's own API
// lives beside it.
func ollamaNativeBase(base string) string {
	return strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
}
