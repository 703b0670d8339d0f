package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/service/retrieve"
)

// Config is every setting, parsed once from RAGENT_* variables and passed
// down as values. Each field is filled from its row in settings (settings.go),
// which docs/configuration.md mirrors (TestConfigReference).
type Config struct {
	HTTPAddr string
	// MetricsAddr serves /metrics on its own listener (an address only the
	// monitoring network reaches; loopback by default); "off": none.
	MetricsAddr string
	// MetricsPublic also serves /metrics on HTTPAddr, the public port.
	MetricsPublic bool
	// Tracing exports OpenTelemetry spans over OTLP: set when
	// OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ variant) is, unless
	// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The exporter reads
	// the OTEL_* variables itself.
	Tracing bool
	// TrustedProxies are the peers whose X-Forwarded-For / X-Real-IP /
	// X-Forwarded-Proto are believed. None by default: anyone can forge
	// those headers, and the client IP keys the login guessing limit.
	TrustedProxies []netip.Prefix
	// AllowedOrigins may send cookie-authenticated writes besides the
	// request's own origin (scheme://Host), e.g. the public https origin of
	// a deployment behind a proxy that rewrites Host.
	AllowedOrigins []string
	// HTTPBodyTimeout bounds reading a request body; HTTPUploadTimeout the
	// body of an upload (default: scaled to the upload size cap).
	HTTPBodyTimeout   time.Duration
	HTTPUploadTimeout time.Duration
	// SSEKeepAlive is how often an idle event stream gets a comment, so
	// proxies do not close it (also while an OpenAI-API request waits in
	// the queue).
	SSEKeepAlive time.Duration
	DatabaseURL  string
	// DatabaseMaxConns caps each instance's Postgres connections (the
	// server's max_connections bounds the sum over instances).
	DatabaseMaxConns int
	RedisURL         string
	RedisPrefix      string
	// Sentinel or Cluster instead of the single node of RedisURL, which
	// then supplies only the password, TLS and (Sentinel) database.
	RedisSentinelAddrs    []string
	RedisSentinelMaster   string
	RedisSentinelPassword string
	RedisClusterAddrs     []string

	MQDriver        string // redis | rocketmq
	RocketMQNamesrv string
	RocketMQBroker  string // where `serve` creates the ingest topic
	// MQVisibilityTimeout is how long a Redis Streams message may stay
	// unacknowledged before another worker takes it over (a crashed worker's
	// document is redelivered after it).
	MQVisibilityTimeout time.Duration

	LLMProvider   string // offline | openai | azure | mistral | ollama | anthropic | googleai | bedrock
	LLMBaseURL    string
	LLMAPIKey     string
	LLMAPIVersion string // Azure's api-version
	LLMRegion     string // Bedrock's AWS region
	LLMChatModel  string
	LLMFastModel  string
	// LLMThinking says how a deep-thinking chat asks the model to think
	// (auto | enable_thinking | off); LLMThinkingModel answers those chats
	// instead of the chat model; LLMThinkingBudget is Anthropic's budget.
	LLMThinking       string
	LLMThinkingModel  string
	LLMThinkingBudget int
	// LLMFallbacksFile lists the model endpoints tried after the primary
	// (JSON, llm.LoadFallbacks), read into LLMFallbacks at start;
	// LLMCooldown is how long a failed endpoint is skipped without a
	// Retry-After.
	LLMFallbacksFile string
	LLMFallbacks     []llm.Endpoint
	LLMCooldown      time.Duration
	// LLMFirstTokenTimeout and LLMIdleTimeout bound a model that sends no
	// first token, or stalls between tokens.
	LLMFirstTokenTimeout time.Duration
	LLMIdleTimeout       time.Duration
	// SearchMinVectorScore is the cosine similarity a chunk found only by
	// vector search needs to count as relevant; -1 picks the provider's
	// default.
	SearchMinVectorScore float64
	RerankModel          string
	RerankBaseURL        string
	RerankMinScore       *float64 // nil: no minimum
	// RerankRequestsPerMinute and RerankTokensPerMinute are the reranker's
	// budget (0 = unlimited).
	RerankRequestsPerMinute int
	RerankTokensPerMinute   int
	EmbedProvider           string
	EmbedModel              string
	EmbedDim                int
	EmbedBaseURL            string
	EmbedAPIKey             string
	// EmbedQueryBaseURL embeds questions at a server of their own (the
	// local model's query process); empty: EmbedBaseURL.
	EmbedQueryBaseURL string
	// EmbedBatchSize is texts per embedding HTTP call.
	EmbedBatchSize int
	// How asymmetric embedding models tell questions from passages
	// (llm.EmbedKinds); all empty: the model's defaults.
	EmbedQueryPrefix       string
	EmbedDocumentPrefix    string
	EmbedQueryInputType    string
	EmbedDocumentInputType string
	// SearchFusion merges hybrid search's two lists (rrf | convex); empty
	// picks the embedder's default.
	SearchFusion string
	// SearchBackend runs keyword search in Postgres or OpenSearch
	// (postgres | opensearch); OpenSearchURL and OpenSearchIndex (the alias,
	// and the prefix of its physical indexes) locate the latter.
	SearchBackend   string
	OpenSearchURL   string
	OpenSearchIndex string
	// OpenSearchVectors moves vector search to OpenSearch's k-NN (Lucene
	// engine) as well; otherwise it stays in pgvector.
	OpenSearchVectors bool
	// EmbedConcurrency caps embedding calls at once across all instances;
	// EmbedQueryWait is how long a query's embedding waits for a slot.
	EmbedConcurrency int
	EmbedQueryWait   time.Duration
	// Budgets (docs/usage-and-quotas.md "Budgets"): what the embedding
	// endpoint and the primary chat endpoint allow per minute, across all
	// instances (0 = unlimited); a fallback endpoint sets its own in
	// RAGENT_LLM_FALLBACKS_FILE. LLMTokenReservation is what a model call
	// naming no max_tokens reserves for its answer.
	EmbedRequestsPerMinute int
	EmbedTokensPerMinute   int
	LLMRequestsPerMinute   int
	LLMTokensPerMinute     int
	LLMTokenReservation    int
	// BudgetWindow replaces the budgets' minute (tests and benchmarks only;
	// no setting): the provider fakes count per this window.
	BudgetWindow time.Duration

	AdminUsername string
	AdminPassword string
	AuthSecret    string
	TokenTTL      time.Duration
	// Wrong-password limits: per username and client address, and per
	// username from any address (wider, against many addresses guessing one
	// account), within LoginFailWindow.
	LoginMaxFailures        int
	LoginMaxFailuresPerUser int
	LoginFailWindow         time.Duration
	// LoginMaxFailuresPerIP bounds failed logins from one client address
	// across all usernames (and, counted apart, failed API-key
	// authentications) within LoginFailWindow.
	LoginMaxFailuresPerIP int
	// SessionRatePerMinute: requests one user may make per minute with
	// session tokens (all their sessions together); 0 = no limit.
	SessionRatePerMinute int
	// AuditLoginRetention: failed-login audit rows older than this are
	// pruned (0 keeps them); AuditCoalesceWindow: refusals of one kind by
	// one principal within it share one row (0 writes each).
	AuditLoginRetention time.Duration
	AuditCoalesceWindow time.Duration
	// RedisAllowEviction starts even when Redis may evict keys
	// (maxmemory-policy other than noeviction), with a warning.
	RedisAllowEviction bool

	ChatLimiterEnabled   bool
	ChatMaxConcurrent    int
	ChatMaxWait          time.Duration
	ChatLease            time.Duration
	ChatPollInterval     time.Duration
	ChatOnRedisError     string // reject | local
	ChatMaxQueue         int
	ChatMaxQueuedPerUser int
	// ChatMaxRunningPerUser is the fair queue's running cap; 0 (unset) is
	// max(1, ChatMaxConcurrent/2), see chatRunningCap.
	ChatMaxRunningPerUser int
	ChatRatePerMinute     int           // chats a user may start per minute; 0 = no limit
	APIKeyRatePerMinute   int           // requests one API key may make per minute; 0 = no limit
	ChatEmptyRetrieval    string        // chat | refuse
	ChatMaxAnswerTokens   int           // the answer model's max_tokens, every chat
	QuotasEnabled         bool          // check usage quotas before chats and searches
	UsageFlushInterval    time.Duration // how often buffered usage records are written
	UsageCallRetention    time.Duration // usage_calls rows older than this are pruned (0 keeps them)
	// ChatDetachedTimeout is how long an /api/v1/chat answer runs on after
	// its client went away (0 stops it at once); ChatResumeTTL and
	// ChatResumeMaxEvents bound the events kept for a client that resumes.
	ChatDetachedTimeout time.Duration
	ChatResumeTTL       time.Duration
	ChatResumeMaxEvents int

	APIKeyMaxTTL time.Duration // longest life of an API key, from its creation

	// The MCP server's sessions (api/mcp): open ones per instance and per
	// key, and how long an unused one stays open.
	MCPMaxSessions       int
	MCPMaxSessionsPerKey int
	MCPSessionIdle       time.Duration

	UploadMaxConcurrent int
	UploadMaxWait       time.Duration
	UploadMaxBytes      int64
	// OutboxRetention is how long sent outbox rows are kept before the
	// reaper deletes them.
	OutboxRetention time.Duration
	// IngestPendingTimeout is how long a document may stay pending after
	// its message was published before the reaper publishes it again.
	IngestPendingTimeout time.Duration
	// IngestConfirmAfter is how long after publishing an ingest message on
	// Redis Streams, and then how often while its document waits, the
	// relay checks the stream still holds it (a failover may lose it).
	IngestConfirmAfter time.Duration

	// URL imports (docs/pipelines.md "For pipelines"): networks a fetch may reach
	// besides the public internet, one fetch's time limit, and the shortest
	// refresh interval a pipeline may ask for.
	FetchAllowNetworks []netip.Prefix
	FetchTimeout       time.Duration
	FetchMinRefresh    time.Duration
	// Webhooks: attempts per event before it is dead-lettered, and the
	// first retry's wait (doubled each time).
	WebhookMaxAttempts int
	WebhookBackoff     time.Duration
	// Fetches at once per instance, and at most per knowledge base;
	// webhooks delivered to at once, and how long failed and skipped
	// deliveries are kept.
	FetchConcurrency         int
	FetchPerKB               int
	WebhookConcurrency       int
	WebhookDeliveryRetention time.Duration

	IngestParser       string // process | inprocess
	IngestParseTimeout time.Duration
	IngestParserMemory int64 // resident memory cap of a parser process, bytes
	IngestMaxTextBytes int64
	IngestMaxChunks    int

	// OCR of images and scanned PDF pages (service/ingest/parse/ocr.go):
	// auto or off, Tesseract's languages, pages read at once per document,
	// and the time one page may take.
	OCR            string
	OCRLanguages   string
	OCRProcesses   int
	OCRPageTimeout time.Duration

	WorkerID int // -1: lease from Redis
	// WorkerLeaseTTL is the Redis lease of a leased worker id: an
	// instance keeps issuing ids for that long (less the clock margin)
	// after Redis stops answering.
	WorkerLeaseTTL time.Duration
	// WorkerLeaseRenew is the lease's renewal period; a new lease is held
	// three periods before it issues ids. Not a setting: 0 is idgen's
	// default (1 s), which every instance of a deployment must share; the
	// tests shorten it so that each of their many instances starts at once.
	WorkerLeaseRenew time.Duration
	Demo             bool

	Role            string // all | api | worker
	ShutdownTimeout time.Duration
	LogLevel        string
	PprofAddr       string // serve net/http/pprof here (e.g. 127.0.0.1:6060); empty: off
	SecureCookie    bool
	InstanceID      string

	// Single sign-on (docs/sso.md): on when OIDCIssuer is set.
	OIDCIssuer        string
	OIDCClientID      string
	OIDCClientSecret  string
	OIDCRedirectURL   string
	OIDCScopes        []string
	OIDCDisplayName   string
	OIDCUsernameClaim string
	OIDCGroupsClaim   string
	OIDCAdminGroups   []string
	OIDCRecheck       time.Duration
	OIDCPostLogoutURL string
	PasswordLogin     bool

	// oidcTransport, when set, carries ragent's calls to the identity
	// provider (not a setting: the tests time the provider's share of a
	// login with it).
	oidcTransport http.RoundTripper
	// bcryptCost, when set, is the password hashes' cost (not a setting:
	// the end-to-end tests hash at bcrypt's minimum; 0 is its default).
	bcryptCost int
	// ingestInFlightPerKB, when set, replaces the relay's bound on a
	// knowledge base's documents in flight, max(16, 2 × the MQ's handlers)
	// (not a setting: the bound follows the handlers, which operators set;
	// the tests lower it, or raise it to check the fairness test fails
	// without it).
	ingestInFlightPerKB int
}

// loadConfig reads the environment through getenv and validates the result.
// Every setting is parsed from its table row (settings): a variable that is
// unset or blank takes the row's default through the same parser.
func loadConfig(getenv func(string) string) (Config, error) {
	var c Config
	var errs []error
	for _, s := range c.settings() {
		v := strings.TrimSpace(getenv(s.name))
		if v == "" {
			v = s.def
		}
		if v == "" {
			continue
		}
		if err := s.value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", s.name, v, err))
		}
	}
	if c.EmbedProvider != "offline" && strings.TrimSpace(getenv("RAGENT_EMBEDDING_DIM")) == "" {
		errs = append(errs, fmt.Errorf("RAGENT_EMBEDDING_DIM is required with RAGENT_EMBEDDING_PROVIDER=%s (the model's vector size, e.g. 1024)", c.EmbedProvider))
	}
	if c.EmbedBaseURL == "" {
		c.EmbedBaseURL = c.LLMBaseURL
	}
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	}
	if c.OIDCGroupsClaim == "none" {
		c.OIDCGroupsClaim = "" // no group mapping
	}
	c.Tracing = (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") &&
		!strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") && getenv("OTEL_TRACES_EXPORTER") != "none"
	if c.EmbedQueryBaseURL != "" && !slices.Contains([]string{"openai", "ollama", "mistral"}, c.EmbedProvider) {
		errs = append(errs, fmt.Errorf("RAGENT_EMBEDDING_QUERY_BASE_URL needs RAGENT_EMBEDDING_PROVIDER openai, ollama or mistral, not %s", c.EmbedProvider))
	}
	if c.EmbedBatchSize < 1 {
		errs = append(errs, fmt.Errorf("RAGENT_EMBEDDING_BATCH_SIZE=%d: must be at least 1", c.EmbedBatchSize))
	}
	if c.EmbedAPIKey == "" {
		c.EmbedAPIKey = c.LLMAPIKey
	}
	// Unset (or negative): the provider's default.
	if strings.TrimSpace(getenv("RAGENT_SEARCH_MIN_VECTOR_SCORE")) == "" || c.SearchMinVectorScore < 0 {
		c.SearchMinVectorScore = retrieve.DefaultMinVectorScore(embedderKind(c))
	}
	if c.SearchFusion == "" {
		c.SearchFusion = string(retrieve.DefaultFusion(embedderKind(c)))
	}
	if c.LLMFastModel == "" {
		c.LLMFastModel = c.LLMChatModel
	}
	if c.LLMFallbacksFile != "" {
		// Keys may come from variables the file names (apiKeyEnv).
		fallbacks, err := llm.LoadFallbacks(c.LLMFallbacksFile, getenv)
		if err != nil {
			errs = append(errs, fmt.Errorf("RAGENT_LLM_FALLBACKS_FILE: %w", err))
		}
		c.LLMFallbacks = fallbacks
	}
	if c.HTTPUploadTimeout == 0 && c.UploadMaxBytes > 0 {
		c.HTTPUploadTimeout = defaultUploadTimeout(c.HTTPBodyTimeout, c.UploadMaxBytes)
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return c, errors.Join(append(errs, c.validate()...)...)
}

// redisOptions says where Redis is (RAGENT_REDIS_URL and the Sentinel or
// Cluster addresses).
func (c Config) redisOptions() redisconn.Options {
	return redisconn.Options{
		URL:           c.RedisURL,
		SentinelAddrs: c.RedisSentinelAddrs, SentinelMaster: c.RedisSentinelMaster,
		SentinelPassword: c.RedisSentinelPassword,
		ClusterAddrs:     c.RedisClusterAddrs,
	}
}

// logAttrs lists every setting for the start-up log, named as in the table
// without the RAGENT_ prefix, with secrets masked and URL passwords redacted.
func (c Config) logAttrs() []any {
	var attrs []any
	for _, s := range c.settings() {
		v := s.value.String()
		switch {
		case s.mask == maskSecret && v != "":
			v = "***"
		case s.mask == maskURL:
			if u, err := url.Parse(v); err != nil {
				v = "***"
			} else {
				v = u.Redacted()
			}
		}
		attrs = append(attrs, strings.ToLower(strings.TrimPrefix(s.name, "RAGENT_")), v)
	}
	return attrs
}

// uploadMinRate is the slowest upload (bytes per second) the default upload
// body deadline still lets through at the full size cap.
const uploadMinRate = 128 << 10

// defaultUploadTimeout gives an upload the JSON body deadline plus the time
// the size cap takes at uploadMinRate (50 MiB: 30s + 400s).
func defaultUploadTimeout(body time.Duration, maxBytes int64) time.Duration {
	return body + time.Duration(maxBytes/uploadMinRate)*time.Second
}

// chatRunningCap is the fair queue's running cap: the setting, or by default
// half the slots (at least one), so a user holding that many is passed over
// while another user below it waits.
func chatRunningCap(c Config) int {
	if c.ChatMaxRunningPerUser > 0 {
		return c.ChatMaxRunningPerUser
	}
	return max(1, c.ChatMaxConcurrent/2)
}

// oidcPostLogoutURL is where the provider returns the browser after
// logout: the setting, else the root of the redirect URL's origin.
func (c Config) oidcPostLogoutURL() string {
	if c.OIDCPostLogoutURL != "" {
		return c.OIDCPostLogoutURL
	}
	u, err := url.Parse(c.OIDCRedirectURL)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/"
}
