package main

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ragent-go/ragent/api"
)

// Config is every setting, parsed once from RAGENT_* variables and passed
// down as values. The README lists them.
type Config struct {
	HTTPAddr string
	// MetricsAddr serves /metrics on its own listener (e.g. an address only
	// the monitoring network reaches); empty: /metrics on HTTPAddr.
	MetricsAddr string
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
	DatabaseURL       string
	RedisURL          string
	RedisPrefix       string

	MQDriver        string // redis | rocketmq
	RocketMQNamesrv string
	RocketMQBroker  string // where `serve` creates the ingest topic
	// MQVisibilityTimeout is how long a Redis Streams message may stay
	// unacknowledged before another worker takes it over (a crashed worker's
	// document is redelivered after it).
	MQVisibilityTimeout time.Duration

	LLMProvider  string // offline | openai | ollama
	LLMBaseURL   string
	LLMAPIKey    string
	LLMChatModel string
	LLMFastModel string
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
	EmbedProvider        string
	EmbedModel           string
	EmbedDim             int
	EmbedBaseURL         string
	EmbedAPIKey          string

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

	ChatLimiterEnabled   bool
	ChatMaxConcurrent    int
	ChatMaxWait          time.Duration
	ChatLease            time.Duration
	ChatPollInterval     time.Duration
	ChatOnRedisError     string // reject | local
	ChatMaxQueue         int
	ChatMaxQueuedPerUser int
	ChatRatePerMinute    int    // chats a user may start per minute; 0 = no limit
	APIKeyRatePerMinute  int    // requests one API key may make per minute; 0 = no limit
	ChatEmptyRetrieval   string // chat | refuse

	UploadMaxConcurrent int
	UploadMaxWait       time.Duration
	UploadMaxBytes      int64
	// OutboxRetention is how long sent outbox rows are kept before the
	// reaper deletes them.
	OutboxRetention time.Duration

	IngestParser       string // process | inprocess
	IngestParseTimeout time.Duration
	IngestParserMemory int64 // resident memory cap of a parser process, bytes
	IngestMaxTextBytes int64
	IngestMaxChunks    int

	WorkerID int // -1: lease from Redis
	Demo     bool

	Role            string // all | api | worker
	ShutdownTimeout time.Duration
	LogLevel        string
	PprofAddr       string // serve net/http/pprof here (e.g. 127.0.0.1:6060); empty: off
	SecureCookie    bool
	InstanceID      string
}

// loadConfig reads the environment through getenv and validates the result.
func loadConfig(getenv func(string) string) (Config, error) {
	e := env{get: getenv}
	host, _ := os.Hostname()
	c := Config{
		HTTPAddr:          e.str("RAGENT_HTTP_ADDR", ":8080"),
		MetricsAddr:       e.str("RAGENT_METRICS_ADDR", ""),
		TrustedProxies:    e.prefixes("RAGENT_TRUSTED_PROXIES"),
		AllowedOrigins:    e.origins("RAGENT_ALLOWED_ORIGINS"),
		HTTPBodyTimeout:   e.duration("RAGENT_HTTP_BODY_TIMEOUT", 30*time.Second),
		HTTPUploadTimeout: e.duration("RAGENT_HTTP_UPLOAD_TIMEOUT", 0),
		DatabaseURL:       e.str("RAGENT_DATABASE_URL", "postgres://ragent:ragent@127.0.0.1:5432/ragent?sslmode=disable"),
		RedisURL:          e.str("RAGENT_REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisPrefix:       e.str("RAGENT_REDIS_PREFIX", "ragent:"),

		MQDriver:            e.str("RAGENT_MQ_DRIVER", "redis"),
		RocketMQNamesrv:     e.str("RAGENT_ROCKETMQ_NAMESRV", "127.0.0.1:9876"),
		RocketMQBroker:      e.str("RAGENT_ROCKETMQ_BROKER", "127.0.0.1:10911"),
		MQVisibilityTimeout: e.duration("RAGENT_MQ_VISIBILITY_TIMEOUT", time.Minute),

		LLMProvider:          e.str("RAGENT_LLM_PROVIDER", "offline"),
		LLMBaseURL:           e.str("RAGENT_LLM_BASE_URL", ""),
		LLMAPIKey:            e.str("RAGENT_LLM_API_KEY", ""),
		LLMChatModel:         e.str("RAGENT_LLM_CHAT_MODEL", ""),
		LLMFastModel:         e.str("RAGENT_LLM_FAST_MODEL", ""),
		LLMFirstTokenTimeout: e.duration("RAGENT_LLM_FIRST_TOKEN_TIMEOUT", 60*time.Second),
		LLMIdleTimeout:       e.duration("RAGENT_LLM_IDLE_TIMEOUT", 60*time.Second),
		SearchMinVectorScore: e.float("RAGENT_SEARCH_MIN_VECTOR_SCORE", -1),
		RerankModel:          e.str("RAGENT_RERANK_MODEL", ""),
		RerankBaseURL:        e.str("RAGENT_RERANK_BASE_URL", ""),
		EmbedProvider:        e.str("RAGENT_EMBEDDING_PROVIDER", "offline"),
		EmbedModel:           e.str("RAGENT_EMBEDDING_MODEL", ""),
		EmbedDim:             e.int("RAGENT_EMBEDDING_DIM", 512),
		EmbedBaseURL:         e.str("RAGENT_EMBEDDING_BASE_URL", ""),
		EmbedAPIKey:          e.str("RAGENT_EMBEDDING_API_KEY", ""),

		AdminUsername: e.str("RAGENT_ADMIN_USERNAME", "admin"),
		AdminPassword: e.str("RAGENT_ADMIN_PASSWORD", ""),
		AuthSecret:    e.str("RAGENT_AUTH_SECRET", ""),
		TokenTTL:      e.duration("RAGENT_TOKEN_TTL", 24*time.Hour),

		LoginMaxFailures:        e.int("RAGENT_LOGIN_MAX_FAILURES", 5),
		LoginMaxFailuresPerUser: e.int("RAGENT_LOGIN_MAX_FAILURES_PER_USER", 20),
		LoginFailWindow:         e.duration("RAGENT_LOGIN_FAIL_WINDOW", 15*time.Minute),

		ChatLimiterEnabled:   e.bool("RAGENT_CHAT_LIMITER_ENABLED", true),
		ChatMaxConcurrent:    e.int("RAGENT_CHAT_MAX_CONCURRENT", 10),
		ChatMaxWait:          e.duration("RAGENT_CHAT_MAX_WAIT", 15*time.Second),
		ChatLease:            e.duration("RAGENT_CHAT_LEASE", 30*time.Second),
		ChatPollInterval:     e.duration("RAGENT_CHAT_POLL_INTERVAL", 200*time.Millisecond),
		ChatOnRedisError:     e.str("RAGENT_CHAT_LIMITER_ON_REDIS_ERROR", "reject"),
		ChatMaxQueue:         e.int("RAGENT_CHAT_MAX_QUEUE", 1000),
		ChatMaxQueuedPerUser: e.int("RAGENT_CHAT_MAX_QUEUED_PER_USER", 3),
		ChatRatePerMinute:    e.int("RAGENT_CHAT_RATE_PER_MINUTE", 30),
		APIKeyRatePerMinute:  e.int("RAGENT_API_KEY_RATE_PER_MINUTE", 600),
		ChatEmptyRetrieval:   e.str("RAGENT_CHAT_EMPTY_RETRIEVAL", "chat"),

		UploadMaxConcurrent: e.int("RAGENT_UPLOAD_MAX_CONCURRENT", 10),
		UploadMaxWait:       e.duration("RAGENT_UPLOAD_MAX_WAIT", 5*time.Second),
		UploadMaxBytes:      int64(e.int("RAGENT_UPLOAD_MAX_BYTES", 50<<20)),
		OutboxRetention:     e.duration("RAGENT_OUTBOX_RETENTION", 7*24*time.Hour),

		IngestParser:       e.str("RAGENT_INGEST_PARSER", "process"),
		IngestParseTimeout: e.duration("RAGENT_INGEST_PARSE_TIMEOUT", 2*time.Minute),
		IngestParserMemory: int64(e.int("RAGENT_INGEST_PARSER_MEMORY", 1<<30)),
		IngestMaxTextBytes: int64(e.int("RAGENT_INGEST_MAX_TEXT_BYTES", 20<<20)),
		IngestMaxChunks:    e.int("RAGENT_INGEST_MAX_CHUNKS", 20_000),

		WorkerID: e.int("RAGENT_WORKER_ID", -1),
		Demo:     e.bool("RAGENT_DEMO", true),

		Role:            e.str("RAGENT_ROLE", "all"),
		ShutdownTimeout: e.duration("RAGENT_SHUTDOWN_TIMEOUT", 20*time.Second),
		LogLevel:        e.str("RAGENT_LOG_LEVEL", "info"),
		PprofAddr:       e.str("RAGENT_PPROF_ADDR", ""),
		SecureCookie:    e.bool("RAGENT_SECURE_COOKIE", false),
		InstanceID:      e.str("RAGENT_INSTANCE_ID", fmt.Sprintf("%s-%d", host, os.Getpid())),
	}
	if c.EmbedProvider != "offline" && strings.TrimSpace(getenv("RAGENT_EMBEDDING_DIM")) == "" {
		e.errs = append(e.errs, fmt.Errorf("RAGENT_EMBEDDING_DIM is required with RAGENT_EMBEDDING_PROVIDER=%s (the model's vector size, e.g. 1024)", c.EmbedProvider))
	}
	if c.EmbedBaseURL == "" {
		c.EmbedBaseURL = c.LLMBaseURL
	}
	if c.EmbedAPIKey == "" {
		c.EmbedAPIKey = c.LLMAPIKey
	}
	if c.SearchMinVectorScore < 0 {
		c.SearchMinVectorScore = 0
		if c.EmbedProvider == "offline" {
			c.SearchMinVectorScore = offlineMinVectorScore
		}
	}
	if c.LLMFastModel == "" {
		c.LLMFastModel = c.LLMChatModel
	}
	if c.HTTPUploadTimeout == 0 && c.UploadMaxBytes > 0 {
		c.HTTPUploadTimeout = defaultUploadTimeout(c.HTTPBodyTimeout, c.UploadMaxBytes)
	}
	return c, errors.Join(append(e.errs, c.validate()...)...)
}

func (c Config) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	oneOf := func(name, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad("%s=%q: must be one of %s", name, v, strings.Join(allowed, ", "))
	}
	oneOf("RAGENT_MQ_DRIVER", c.MQDriver, "redis", "rocketmq")
	oneOf("RAGENT_LLM_PROVIDER", c.LLMProvider, "offline", "openai", "ollama")
	oneOf("RAGENT_EMBEDDING_PROVIDER", c.EmbedProvider, "offline", "openai", "ollama")
	oneOf("RAGENT_CHAT_LIMITER_ON_REDIS_ERROR", c.ChatOnRedisError, "reject", "local")
	oneOf("RAGENT_CHAT_EMPTY_RETRIEVAL", c.ChatEmptyRetrieval, "chat", "refuse")
	oneOf("RAGENT_ROLE", c.Role, "all", "api", "worker")
	oneOf("RAGENT_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error")
	for name, u := range map[string]string{"RAGENT_DATABASE_URL": c.DatabaseURL, "RAGENT_REDIS_URL": c.RedisURL} {
		if _, err := url.Parse(u); err != nil || !strings.Contains(u, "://") {
			bad("%s: not a URL", name)
		}
	}
	if c.LLMProvider != "offline" && c.LLMChatModel == "" {
		bad("RAGENT_LLM_CHAT_MODEL is required with RAGENT_LLM_PROVIDER=%s", c.LLMProvider)
	}
	if c.LLMProvider == "openai" && c.LLMBaseURL == "" {
		bad("RAGENT_LLM_BASE_URL is required with RAGENT_LLM_PROVIDER=openai")
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
		"RAGENT_INGEST_MAX_CHUNKS": c.IngestMaxChunks,
	}
	if c.ChatRatePerMinute < 0 {
		bad("RAGENT_CHAT_RATE_PER_MINUTE must be 0 (no limit) or more")
	}
	if c.APIKeyRatePerMinute < 0 {
		bad("RAGENT_API_KEY_RATE_PER_MINUTE must be 0 (no limit) or more")
	}
	for name, v := range positive {
		if v < 1 {
			bad("%s must be at least 1", name)
		}
	}
	for name, d := range map[string]time.Duration{
		"RAGENT_CHAT_MAX_WAIT": c.ChatMaxWait, "RAGENT_CHAT_LEASE": c.ChatLease,
		"RAGENT_CHAT_POLL_INTERVAL": c.ChatPollInterval, "RAGENT_UPLOAD_MAX_WAIT": c.UploadMaxWait,
		"RAGENT_TOKEN_TTL": c.TokenTTL, "RAGENT_SHUTDOWN_TIMEOUT": c.ShutdownTimeout, "RAGENT_LOGIN_FAIL_WINDOW": c.LoginFailWindow,
		"RAGENT_LLM_FIRST_TOKEN_TIMEOUT": c.LLMFirstTokenTimeout, "RAGENT_LLM_IDLE_TIMEOUT": c.LLMIdleTimeout,
		"RAGENT_HTTP_BODY_TIMEOUT": c.HTTPBodyTimeout, "RAGENT_HTTP_UPLOAD_TIMEOUT": c.HTTPUploadTimeout,
		"RAGENT_INGEST_PARSE_TIMEOUT": c.IngestParseTimeout,
		"RAGENT_OUTBOX_RETENTION":     c.OutboxRetention,
	} {
		if d <= 0 {
			bad("%s must be positive", name)
		}
	}
	if c.SearchMinVectorScore > 1 {
		bad("RAGENT_SEARCH_MIN_VECTOR_SCORE must be a cosine similarity, at most 1")
	}
	if c.ChatLease < 3*time.Second {
		bad("RAGENT_CHAT_LEASE must be at least 3s (it is renewed every lease/3)")
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
	if c.WorkerID > 1023 || c.WorkerID < -1 {
		bad("RAGENT_WORKER_ID must be between 0 and 1023")
	}
	if c.LoginMaxFailuresPerUser < c.LoginMaxFailures {
		bad("RAGENT_LOGIN_MAX_FAILURES_PER_USER must be at least RAGENT_LOGIN_MAX_FAILURES")
	}
	if c.AuthSecret != "" && len(c.AuthSecret) < 32 {
		bad("RAGENT_AUTH_SECRET must be at least 32 characters")
	}
	return errs
}

// LogValue lists the settings for the start-up log with secrets masked.
func (c Config) logAttrs() []any {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return "***"
	}
	redactURL := func(s string) string {
		u, err := url.Parse(s)
		if err != nil {
			return "***"
		}
		return u.Redacted()
	}
	return []any{
		"http_addr", c.HTTPAddr, "metrics_addr", c.MetricsAddr, "trusted_proxies", fmt.Sprint(c.TrustedProxies),
		"allowed_origins", strings.Join(c.AllowedOrigins, ","), "http_body_timeout", c.HTTPBodyTimeout.String(),
		"http_upload_timeout", c.HTTPUploadTimeout.String(), "database_url", redactURL(c.DatabaseURL), "redis_url", redactURL(c.RedisURL),
		"redis_prefix", c.RedisPrefix, "mq_driver", c.MQDriver, "rocketmq_namesrv", c.RocketMQNamesrv, "rocketmq_broker", c.RocketMQBroker,
		"llm_provider", c.LLMProvider, "llm_base_url", c.LLMBaseURL, "llm_api_key", mask(c.LLMAPIKey),
		"llm_chat_model", c.LLMChatModel, "llm_fast_model", c.LLMFastModel,
		"llm_first_token_timeout", c.LLMFirstTokenTimeout.String(), "llm_idle_timeout", c.LLMIdleTimeout.String(),
		"search_min_vector_score", c.SearchMinVectorScore, "embedding_provider", c.EmbedProvider, "embedding_model", c.EmbedModel, "embedding_dim", c.EmbedDim,
		"admin_username", c.AdminUsername, "admin_password", mask(c.AdminPassword), "auth_secret", mask(c.AuthSecret),
		"login_max_failures", c.LoginMaxFailures, "login_max_failures_per_user", c.LoginMaxFailuresPerUser, "login_fail_window", c.LoginFailWindow.String(),
		"chat_limiter_enabled", c.ChatLimiterEnabled, "chat_max_concurrent", c.ChatMaxConcurrent,
		"chat_max_wait", c.ChatMaxWait.String(), "chat_lease", c.ChatLease.String(), "chat_poll_interval", c.ChatPollInterval.String(),
		"chat_on_redis_error", c.ChatOnRedisError, "chat_max_queue", c.ChatMaxQueue, "chat_max_queued_per_user", c.ChatMaxQueuedPerUser,
		"chat_rate_per_minute", c.ChatRatePerMinute, "api_key_rate_per_minute", c.APIKeyRatePerMinute,
		"chat_empty_retrieval", c.ChatEmptyRetrieval, "upload_max_concurrent", c.UploadMaxConcurrent,
		"upload_max_wait", c.UploadMaxWait.String(), "upload_max_bytes", c.UploadMaxBytes,
		"ingest_parser", c.IngestParser, "ingest_parse_timeout", c.IngestParseTimeout.String(),
		"ingest_parser_memory", c.IngestParserMemory, "ingest_max_text_bytes", c.IngestMaxTextBytes, "ingest_max_chunks", c.IngestMaxChunks,
		"outbox_retention", c.OutboxRetention.String(),
		"worker_id", c.WorkerID, "demo", c.Demo, "role", c.Role, "instance_id", c.InstanceID, "pprof_addr", c.PprofAddr,
	}
}

// uploadMinRate is the slowest upload (bytes per second) the default upload
// body deadline still lets through at the full size cap.
const uploadMinRate = 128 << 10

// defaultUploadTimeout gives an upload the JSON body deadline plus the time
// the size cap takes at uploadMinRate (50 MiB: 30s + 400s).
func defaultUploadTimeout(body time.Duration, maxBytes int64) time.Duration {
	return body + time.Duration(maxBytes/uploadMinRate)*time.Second
}

type env struct {
	get  func(string) string
	errs []error
}

func (e *env) str(name, def string) string {
	if v := strings.TrimSpace(e.get(name)); v != "" {
		return v
	}
	return def
}

func (e *env) int(name string, def int) int {
	v := strings.TrimSpace(e.get(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not an integer", name, v))
		return def
	}
	return n
}

func (e *env) float(name string, def float64) float64 {
	v := strings.TrimSpace(e.get(name))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not a number", name, v))
		return def
	}
	return f
}

func (e *env) bool(name string, def bool) bool {
	v := strings.TrimSpace(e.get(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not a boolean", name, v))
		return def
	}
	return b
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(e.get(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not a duration (e.g. 15s)", name, v))
		return def
	}
	return d
}

// list splits a comma-separated variable, dropping empty items.
func (e *env) list(name string) []string {
	var out []string
	for _, item := range strings.Split(e.get(name), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// prefixes reads a comma-separated list of CIDRs; a bare IP stands for
// itself alone.
func (e *env) prefixes(name string) []netip.Prefix {
	var out []netip.Prefix
	for _, item := range e.list(name) {
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(item); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		e.errs = append(e.errs, fmt.Errorf("%s: %q is not a CIDR (e.g. 10.0.0.0/8) or an IP", name, item))
	}
	return out
}

// origins reads a comma-separated list of origins (scheme://host[:port]).
func (e *env) origins(name string) []string {
	var out []string
	for _, item := range e.list(name) {
		o, ok := api.NormalizeOrigin(item)
		if !ok {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not an origin (scheme://host[:port], no path)", name, item))
			continue
		}
		out = append(out, o)
	}
	return out
}
