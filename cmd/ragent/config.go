package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting, parsed once from RAGENT_* variables and passed
// down as values. The README lists them.
type Config struct {
	HTTPAddr    string
	DatabaseURL string
	RedisURL    string
	RedisPrefix string

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

	ChatLimiterEnabled   bool
	ChatMaxConcurrent    int
	ChatMaxWait          time.Duration
	ChatLease            time.Duration
	ChatPollInterval     time.Duration
	ChatOnRedisError     string // reject | local
	ChatMaxQueue         int
	ChatMaxQueuedPerUser int
	ChatEmptyRetrieval   string // chat | refuse

	UploadMaxConcurrent int
	UploadMaxWait       time.Duration
	UploadMaxBytes      int64
	// OutboxRetention is how long sent outbox rows are kept before the
	// reaper deletes them.
	OutboxRetention time.Duration

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
		HTTPAddr:    e.str("RAGENT_HTTP_ADDR", ":8080"),
		DatabaseURL: e.str("RAGENT_DATABASE_URL", "postgres://ragent:ragent@127.0.0.1:5432/ragent?sslmode=disable"),
		RedisURL:    e.str("RAGENT_REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisPrefix: e.str("RAGENT_REDIS_PREFIX", "ragent:"),

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

		ChatLimiterEnabled:   e.bool("RAGENT_CHAT_LIMITER_ENABLED", true),
		ChatMaxConcurrent:    e.int("RAGENT_CHAT_MAX_CONCURRENT", 10),
		ChatMaxWait:          e.duration("RAGENT_CHAT_MAX_WAIT", 15*time.Second),
		ChatLease:            e.duration("RAGENT_CHAT_LEASE", 30*time.Second),
		ChatPollInterval:     e.duration("RAGENT_CHAT_POLL_INTERVAL", 200*time.Millisecond),
		ChatOnRedisError:     e.str("RAGENT_CHAT_LIMITER_ON_REDIS_ERROR", "reject"),
		ChatMaxQueue:         e.int("RAGENT_CHAT_MAX_QUEUE", 1000),
		ChatMaxQueuedPerUser: e.int("RAGENT_CHAT_MAX_QUEUED_PER_USER", 3),
		ChatEmptyRetrieval:   e.str("RAGENT_CHAT_EMPTY_RETRIEVAL", "chat"),

		UploadMaxConcurrent: e.int("RAGENT_UPLOAD_MAX_CONCURRENT", 10),
		UploadMaxWait:       e.duration("RAGENT_UPLOAD_MAX_WAIT", 5*time.Second),
		UploadMaxBytes:      int64(e.int("RAGENT_UPLOAD_MAX_BYTES", 50<<20)),
		OutboxRetention:     e.duration("RAGENT_OUTBOX_RETENTION", 7*24*time.Hour),

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
	}
	for name, v := range positive {
		if v < 1 {
			bad("%s must be at least 1", name)
		}
	}
	for name, d := range map[string]time.Duration{
		"RAGENT_CHAT_MAX_WAIT": c.ChatMaxWait, "RAGENT_CHAT_LEASE": c.ChatLease,
		"RAGENT_CHAT_POLL_INTERVAL": c.ChatPollInterval, "RAGENT_UPLOAD_MAX_WAIT": c.UploadMaxWait,
		"RAGENT_TOKEN_TTL": c.TokenTTL, "RAGENT_SHUTDOWN_TIMEOUT": c.ShutdownTimeout,
		"RAGENT_LLM_FIRST_TOKEN_TIMEOUT": c.LLMFirstTokenTimeout, "RAGENT_LLM_IDLE_TIMEOUT": c.LLMIdleTimeout,
		"RAGENT_OUTBOX_RETENTION": c.OutboxRetention,
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
	if c.WorkerID > 1023 || c.WorkerID < -1 {
		bad("RAGENT_WORKER_ID must be between 0 and 1023")
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
		"http_addr", c.HTTPAddr, "database_url", redactURL(c.DatabaseURL), "redis_url", redactURL(c.RedisURL),
		"redis_prefix", c.RedisPrefix, "mq_driver", c.MQDriver, "rocketmq_namesrv", c.RocketMQNamesrv, "rocketmq_broker", c.RocketMQBroker,
		"llm_provider", c.LLMProvider, "llm_base_url", c.LLMBaseURL, "llm_api_key", mask(c.LLMAPIKey),
		"llm_chat_model", c.LLMChatModel, "llm_fast_model", c.LLMFastModel,
		"llm_first_token_timeout", c.LLMFirstTokenTimeout.String(), "llm_idle_timeout", c.LLMIdleTimeout.String(),
		"search_min_vector_score", c.SearchMinVectorScore, "embedding_provider", c.EmbedProvider, "embedding_model", c.EmbedModel, "embedding_dim", c.EmbedDim,
		"admin_username", c.AdminUsername, "admin_password", mask(c.AdminPassword), "auth_secret", mask(c.AuthSecret),
		"chat_limiter_enabled", c.ChatLimiterEnabled, "chat_max_concurrent", c.ChatMaxConcurrent,
		"chat_max_wait", c.ChatMaxWait.String(), "chat_lease", c.ChatLease.String(), "chat_poll_interval", c.ChatPollInterval.String(),
		"chat_on_redis_error", c.ChatOnRedisError, "chat_max_queue", c.ChatMaxQueue, "chat_max_queued_per_user", c.ChatMaxQueuedPerUser,
		"chat_empty_retrieval", c.ChatEmptyRetrieval, "upload_max_concurrent", c.UploadMaxConcurrent,
		"upload_max_wait", c.UploadMaxWait.String(), "upload_max_bytes", c.UploadMaxBytes,
		"outbox_retention", c.OutboxRetention.String(),
		"worker_id", c.WorkerID, "demo", c.Demo, "role", c.Role, "instance_id", c.InstanceID, "pprof_addr", c.PprofAddr,
	}
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
