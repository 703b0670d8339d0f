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
	"github.com/ragent-go/ragent/service/ingest/parse"
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
	RedisURL     string
	RedisPrefix  string
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
	EmbedProvider        string
	EmbedModel           string
	EmbedDim             int
	EmbedBaseURL         string
	EmbedAPIKey          string
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

func (c Config) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, c.validateOIDC()...)
	oneOf := func(name, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad("%s=%q: must be one of %s", name, v, strings.Join(allowed, ", "))
	}
	oneOf("RAGENT_MQ_DRIVER", c.MQDriver, "redis", "rocketmq")
	oneOf("RAGENT_LLM_PROVIDER", c.LLMProvider, "offline", "openai", "azure", "mistral", "ollama", "anthropic", "googleai", "bedrock")
	oneOf("RAGENT_LLM_THINKING", c.LLMThinking, "auto", "enable_thinking", "off")
	oneOf("RAGENT_EMBEDDING_PROVIDER", c.EmbedProvider, "offline", "openai", "mistral", "ollama", "googleai", "bedrock")
	oneOf("RAGENT_SEARCH_FUSION", c.SearchFusion, "rrf", "convex")
	oneOf("RAGENT_SEARCH_BACKEND", c.SearchBackend, "postgres", "opensearch")
	oneOf("RAGENT_CHAT_LIMITER_ON_REDIS_ERROR", c.ChatOnRedisError, "reject", "local")
	oneOf("RAGENT_CHAT_EMPTY_RETRIEVAL", c.ChatEmptyRetrieval, "chat", "refuse")
	oneOf("RAGENT_ROLE", c.Role, "all", "api", "worker")
	oneOf("RAGENT_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error")
	for name, u := range map[string]string{"RAGENT_DATABASE_URL": c.DatabaseURL, "RAGENT_REDIS_URL": c.RedisURL} {
		if _, err := url.Parse(u); err != nil || !strings.Contains(u, "://") {
			bad("%s: not a URL", name)
		}
	}
	switch sentinel, cluster := len(c.RedisSentinelAddrs) > 0, len(c.RedisClusterAddrs) > 0; {
	case sentinel && cluster:
		bad("RAGENT_REDIS_SENTINEL_ADDRS and RAGENT_REDIS_CLUSTER_ADDRS are both set: Redis runs behind Sentinel or as a Cluster, set one")
	case sentinel && c.RedisSentinelMaster == "":
		bad("RAGENT_REDIS_SENTINEL_MASTER is required with RAGENT_REDIS_SENTINEL_ADDRS")
	case !sentinel && (c.RedisSentinelMaster != "" || c.RedisSentinelPassword != ""):
		bad("RAGENT_REDIS_SENTINEL_MASTER and RAGENT_REDIS_SENTINEL_PASSWORD need RAGENT_REDIS_SENTINEL_ADDRS")
	}
	if c.LLMProvider != "offline" && c.LLMChatModel == "" {
		bad("RAGENT_LLM_CHAT_MODEL is required with RAGENT_LLM_PROVIDER=%s", c.LLMProvider)
	}
	if (c.LLMProvider == "openai" || c.LLMProvider == "azure") && c.LLMBaseURL == "" {
		bad("RAGENT_LLM_BASE_URL is required with RAGENT_LLM_PROVIDER=%s", c.LLMProvider)
	}
	if (c.LLMProvider == "bedrock" || c.EmbedProvider == "bedrock") && c.LLMRegion == "" {
		bad("RAGENT_LLM_REGION is required with bedrock")
	}
	if len(c.LLMFallbacks) > 0 && c.LLMProvider == "offline" {
		bad("RAGENT_LLM_FALLBACKS_FILE needs a primary model (RAGENT_LLM_PROVIDER is offline)")
	}
	if c.EmbedProvider != "offline" && c.EmbedModel == "" {
		bad("RAGENT_EMBEDDING_MODEL is required with RAGENT_EMBEDDING_PROVIDER=%s", c.EmbedProvider)
	}
	if c.EmbedDim < 1 || c.EmbedDim > 4000 {
		bad("RAGENT_EMBEDDING_DIM must be between 1 and 4000 (pgvector halfvec limit)")
	}
	positive := map[string]int{
		"RAGENT_CHAT_MAX_CONCURRENT": c.ChatMaxConcurrent, "RAGENT_CHAT_MAX_QUEUE": c.ChatMaxQueue,
		"RAGENT_CHAT_MAX_QUEUED_PER_USER": c.ChatMaxQueuedPerUser, "RAGENT_UPLOAD_MAX_CONCURRENT": c.UploadMaxConcurrent,
		"RAGENT_LOGIN_MAX_FAILURES": c.LoginMaxFailures, "RAGENT_LOGIN_MAX_FAILURES_PER_USER": c.LoginMaxFailuresPerUser,
		"RAGENT_INGEST_MAX_CHUNKS": c.IngestMaxChunks, "RAGENT_EMBEDDING_CONCURRENCY": c.EmbedConcurrency,
		"RAGENT_WEBHOOK_MAX_ATTEMPTS": c.WebhookMaxAttempts, "RAGENT_WEBHOOK_CONCURRENCY": c.WebhookConcurrency,
		"RAGENT_FETCH_CONCURRENCY": c.FetchConcurrency, "RAGENT_FETCH_PER_KB": c.FetchPerKB,
		"RAGENT_LOGIN_MAX_FAILURES_PER_IP": c.LoginMaxFailuresPerIP,
		"RAGENT_CHAT_MAX_ANSWER_TOKENS":    c.ChatMaxAnswerTokens,
		"RAGENT_MCP_MAX_SESSIONS":          c.MCPMaxSessions, "RAGENT_MCP_MAX_SESSIONS_PER_KEY": c.MCPMaxSessionsPerKey,
		"RAGENT_CHAT_RESUME_MAX_EVENTS": c.ChatResumeMaxEvents,
	}
	if c.ChatDetachedTimeout < 0 {
		bad("RAGENT_CHAT_DETACHED_TIMEOUT must be 0 (a disconnect stops the answer) or more")
	}
	if c.ChatMaxRunningPerUser < 0 {
		bad("RAGENT_CHAT_MAX_RUNNING_PER_USER must be at least 1 (unset: half of RAGENT_CHAT_MAX_CONCURRENT)")
	}
	if c.UsageFlushInterval <= 0 {
		bad("RAGENT_USAGE_FLUSH_INTERVAL must be positive")
	}
	for name, v := range map[string]int{
		"RAGENT_LLM_REQUESTS_PER_MINUTE": c.LLMRequestsPerMinute, "RAGENT_LLM_TOKENS_PER_MINUTE": c.LLMTokensPerMinute,
		"RAGENT_EMBEDDING_REQUESTS_PER_MINUTE": c.EmbedRequestsPerMinute, "RAGENT_EMBEDDING_TOKENS_PER_MINUTE": c.EmbedTokensPerMinute,
	} {
		if v < 0 {
			bad("%s must be 0 (unlimited) or more", name)
		}
	}
	if c.LLMTokenReservation < 1 {
		bad("RAGENT_LLM_TOKEN_RESERVATION must be at least 1")
	}
	if c.UsageCallRetention != 0 && c.UsageCallRetention < 24*time.Hour {
		// The per-day totals quotas and the usage page read are kept apart
		// (usage_daily), but a month's records should outlive the month.
		bad("RAGENT_USAGE_CALL_RETENTION must be 0 (keep) or at least 24h")
	}
	if c.ChatRatePerMinute < 0 {
		bad("RAGENT_CHAT_RATE_PER_MINUTE must be 0 (no limit) or more")
	}
	if c.MCPSessionIdle <= 0 {
		bad("RAGENT_MCP_SESSION_IDLE must be positive")
	}
	if c.APIKeyRatePerMinute < 0 {
		bad("RAGENT_API_KEY_RATE_PER_MINUTE must be 0 (no limit) or more")
	}
	if c.SessionRatePerMinute < 0 {
		bad("RAGENT_SESSION_RATE_PER_MINUTE must be 0 (no limit) or more")
	}
	if c.AuditLoginRetention != 0 && c.AuditLoginRetention < 24*time.Hour {
		// The table's trigger refuses to delete younger rows (migration 0016).
		bad("RAGENT_AUDIT_LOGIN_RETENTION must be 0 (keep) or at least 24h")
	}
	if c.AuditCoalesceWindow < 0 {
		bad("RAGENT_AUDIT_COALESCE_WINDOW must be 0 (no coalescing) or more")
	}
	for name, v := range positive {
		if v < 1 {
			bad("%s must be at least 1", name)
		}
	}
	for name, d := range map[string]time.Duration{
		"RAGENT_CHAT_MAX_WAIT": c.ChatMaxWait, "RAGENT_CHAT_LEASE": c.ChatLease, "RAGENT_WEBHOOK_DELIVERY_RETENTION": c.WebhookDeliveryRetention,
		"RAGENT_CHAT_POLL_INTERVAL": c.ChatPollInterval, "RAGENT_UPLOAD_MAX_WAIT": c.UploadMaxWait,
		"RAGENT_OUTBOX_RETENTION": c.OutboxRetention,
		"RAGENT_TOKEN_TTL":        c.TokenTTL, "RAGENT_SHUTDOWN_TIMEOUT": c.ShutdownTimeout, "RAGENT_LOGIN_FAIL_WINDOW": c.LoginFailWindow,
		"RAGENT_LLM_FIRST_TOKEN_TIMEOUT": c.LLMFirstTokenTimeout, "RAGENT_LLM_IDLE_TIMEOUT": c.LLMIdleTimeout,
		"RAGENT_LLM_COOLDOWN":      c.LLMCooldown,
		"RAGENT_HTTP_BODY_TIMEOUT": c.HTTPBodyTimeout, "RAGENT_HTTP_UPLOAD_TIMEOUT": c.HTTPUploadTimeout,
		"RAGENT_INGEST_PARSE_TIMEOUT": c.IngestParseTimeout, "RAGENT_SSE_KEEPALIVE": c.SSEKeepAlive,
		"RAGENT_EMBEDDING_QUERY_WAIT": c.EmbedQueryWait,
		"RAGENT_FETCH_TIMEOUT":        c.FetchTimeout, "RAGENT_FETCH_MIN_REFRESH": c.FetchMinRefresh,
		"RAGENT_WEBHOOK_BACKOFF": c.WebhookBackoff, "RAGENT_API_KEY_MAX_TTL": c.APIKeyMaxTTL,
		"RAGENT_CHAT_RESUME_TTL": c.ChatResumeTTL,
	} {
		if d <= 0 {
			bad("%s must be positive", name)
		}
	}
	if c.SearchMinVectorScore > 1 {
		bad("RAGENT_SEARCH_MIN_VECTOR_SCORE must be a cosine similarity, at most 1")
	}
	if c.ChatLease < 3*time.Second {
		bad("RAGENT_CHAT_LEASE must be at least 3s (it is renewed every min(lease/3, 2s))")
	}
	if c.UploadMaxBytes < 1 {
		bad("RAGENT_UPLOAD_MAX_BYTES must be positive")
	}
	if c.IngestParser != "process" && c.IngestParser != "inprocess" {
		bad("RAGENT_INGEST_PARSER must be process or inprocess")
	}
	if c.IngestParserMemory < 64<<20 {
		bad("RAGENT_INGEST_PARSER_MEMORY must be at least 67108864 (64 MiB)")
	}
	if c.IngestMaxTextBytes < 1 {
		bad("RAGENT_INGEST_MAX_TEXT_BYTES must be positive")
	}
	if c.OCR != parse.OCRAuto && c.OCR != parse.OCROff {
		bad("RAGENT_OCR must be auto or off")
	}
	if !parse.ValidOCRLanguages(c.OCRLanguages) {
		bad("RAGENT_OCR_LANGUAGES must be Tesseract language names joined by + (e.g. chi_sim+eng)")
	}
	if c.OCRProcesses < 1 || c.OCRProcesses > 16 {
		bad("RAGENT_OCR_PROCESSES must be between 1 and 16")
	}
	if c.OCRPageTimeout < time.Second {
		bad("RAGENT_OCR_PAGE_TIMEOUT must be at least 1s")
	}
	if c.WorkerID > 1023 || c.WorkerID < -1 {
		bad("RAGENT_WORKER_ID must be between 0 and 1023")
	}
	if c.WorkerLeaseTTL < time.Second {
		bad("RAGENT_WORKER_LEASE_TTL must be at least 1s")
	}
	if c.IngestPendingTimeout < time.Second {
		bad("RAGENT_INGEST_PENDING_TIMEOUT must be at least 1s")
	}
	if c.IngestConfirmAfter < 100*time.Millisecond || c.IngestConfirmAfter > c.IngestPendingTimeout {
		bad("RAGENT_INGEST_CONFIRM_AFTER must be between 100ms and RAGENT_INGEST_PENDING_TIMEOUT")
	}
	if c.LoginMaxFailuresPerUser < c.LoginMaxFailures {
		bad("RAGENT_LOGIN_MAX_FAILURES_PER_USER must be at least RAGENT_LOGIN_MAX_FAILURES")
	}
	if c.AuthSecret != "" && len(c.AuthSecret) < 32 {
		bad("RAGENT_AUTH_SECRET must be at least 32 characters")
	}
	return errs
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

// validateOIDC checks the single sign-on settings.
func (c Config) validateOIDC() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	absolute := func(name, v string) {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("%s=%q: must be an absolute http(s) URL", name, v)
		}
	}
	if c.OIDCIssuer == "" {
		for name, v := range map[string]string{"RAGENT_OIDC_CLIENT_ID": c.OIDCClientID, "RAGENT_OIDC_REDIRECT_URL": c.OIDCRedirectURL} {
			if v != "" {
				bad("%s is set but RAGENT_OIDC_ISSUER is not: single sign-on needs the issuer", name)
			}
		}
		if !c.PasswordLogin {
			bad("RAGENT_PASSWORD_LOGIN=false needs single sign-on (RAGENT_OIDC_ISSUER): nobody but the break-glass admin could sign in")
		}
		return errs
	}
	absolute("RAGENT_OIDC_ISSUER", c.OIDCIssuer)
	if c.OIDCClientID == "" {
		bad("RAGENT_OIDC_CLIENT_ID is required with RAGENT_OIDC_ISSUER")
	}
	if c.OIDCRedirectURL == "" {
		bad("RAGENT_OIDC_REDIRECT_URL is required with RAGENT_OIDC_ISSUER (this server's /api/v1/auth/oidc/callback as the provider calls it)")
	} else {
		absolute("RAGENT_OIDC_REDIRECT_URL", c.OIDCRedirectURL)
		if u, err := url.Parse(c.OIDCRedirectURL); err == nil && u.Path != "/api/v1/auth/oidc/callback" {
			bad("RAGENT_OIDC_REDIRECT_URL=%q: the path must be /api/v1/auth/oidc/callback", c.OIDCRedirectURL)
		}
	}
	if c.OIDCPostLogoutURL != "" {
		absolute("RAGENT_OIDC_POST_LOGOUT_URL", c.OIDCPostLogoutURL)
	}
	if c.OIDCUsernameClaim == "" {
		bad("RAGENT_OIDC_USERNAME_CLAIM must not be empty")
	}
	if c.OIDCRecheck <= 0 || c.OIDCRecheck > c.TokenTTL {
		bad("RAGENT_OIDC_RECHECK=%s: must be above 0 and at most RAGENT_TOKEN_TTL (%s)", c.OIDCRecheck, c.TokenTTL)
	}
	if len(c.OIDCAdminGroups) > 0 && c.OIDCGroupsClaim == "" {
		bad("RAGENT_OIDC_ADMIN_GROUPS needs RAGENT_OIDC_GROUPS_CLAIM: the admin groups are read from it")
	}
	return errs
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
