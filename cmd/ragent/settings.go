package main

import (
	"slices"
	"time"

	"github.com/ragent-go/ragent/service/ingest/parse"
)

// setting is one row of the configuration table: the loader, the start-up
// log and the configuration reference (docs/configuration.md, TestConfigReference) all read this one list, so a
// new setting is added in one place (plus its row in settings_doc.go, which the test
// demands).
type setting struct {
	name  string // environment variable
	def   string // default, parsed like a set value; "" leaves the zero value
	value value  // the Config field it fills
	mask  mask   // how the start-up log shows it
}

type mask int

const (
	maskNone   mask = iota
	maskSecret      // logged as *** when set
	maskURL         // logged with its password redacted
)

// settings binds the table to c's fields, area by area (the order of
// docs/configuration.md). A rule of one setting alone is in its row
// (scalar.must); rules that relate several settings stay in validate.
func (c *Config) settings() []setting {
	return slices.Concat(c.serverSettings(), c.modelSettings(), c.accountSettings(), c.chatSettings(),
		c.ingestSettings(), c.instanceSettings())
}

// serverSettings are the settings of the HTTP server, Redis and the message queue.
func (c *Config) serverSettings() []setting {
	return []setting{
		{"RAGENT_HTTP_ADDR", ":8080", strValue(&c.HTTPAddr), maskNone},
		{"RAGENT_METRICS_ADDR", "127.0.0.1:9464", strValue(&c.MetricsAddr), maskNone},
		{"RAGENT_METRICS_PUBLIC", "false", boolValue(&c.MetricsPublic), maskNone},
		{"RAGENT_TRUSTED_PROXIES", "", prefixesValue(&c.TrustedProxies), maskNone},
		{"RAGENT_ALLOWED_ORIGINS", "", originsValue(&c.AllowedOrigins), maskNone},
		{"RAGENT_HTTP_BODY_TIMEOUT", "30s", positiveDuration(&c.HTTPBodyTimeout), maskNone},
		{"RAGENT_HTTP_UPLOAD_TIMEOUT", "", positiveDuration(&c.HTTPUploadTimeout), maskNone},
		{"RAGENT_SSE_KEEPALIVE", "15s", positiveDuration(&c.SSEKeepAlive), maskNone},
		{"RAGENT_DATABASE_URL", "postgres://ragent:ragent@127.0.0.1:5432/ragent?sslmode=disable", strValue(&c.DatabaseURL).rule(isURL), maskURL},
		{"RAGENT_DATABASE_MAX_CONNS", "20", intValue(&c.DatabaseMaxConns).must(between(2, 1000), "must be between 2 and 1000"), maskNone},
		{"RAGENT_REDIS_URL", "redis://127.0.0.1:6379/0", strValue(&c.RedisURL).rule(isURL), maskURL},
		{"RAGENT_REDIS_PREFIX", "ragent:", strValue(&c.RedisPrefix), maskNone},
		{"RAGENT_REDIS_SENTINEL_ADDRS", "", addrsValue(&c.RedisSentinelAddrs), maskNone},
		{"RAGENT_REDIS_SENTINEL_MASTER", "", strValue(&c.RedisSentinelMaster), maskNone},
		{"RAGENT_REDIS_SENTINEL_PASSWORD", "", strValue(&c.RedisSentinelPassword), maskSecret},
		{"RAGENT_REDIS_CLUSTER_ADDRS", "", addrsValue(&c.RedisClusterAddrs), maskNone},

		{"RAGENT_MQ_DRIVER", "redis", oneOf(&c.MQDriver, "redis", "rocketmq"), maskNone},
		{"RAGENT_ROCKETMQ_NAMESRV", "127.0.0.1:9876", strValue(&c.RocketMQNamesrv), maskNone},
		{"RAGENT_ROCKETMQ_BROKER", "127.0.0.1:10911", strValue(&c.RocketMQBroker), maskNone},
		{"RAGENT_MQ_VISIBILITY_TIMEOUT", "1m", durationValue(&c.MQVisibilityTimeout), maskNone},
	}
}

// modelSettings are the settings of the chat and embedding models, their budgets, search and reranking.
func (c *Config) modelSettings() []setting {
	return []setting{
		{"RAGENT_LLM_PROVIDER", "offline", oneOf(&c.LLMProvider, "offline", "openai", "azure", "mistral", "ollama", "anthropic", "googleai", "bedrock"), maskNone},
		{"RAGENT_LLM_BASE_URL", "", strValue(&c.LLMBaseURL), maskURL},
		{"RAGENT_LLM_API_KEY", "", strValue(&c.LLMAPIKey), maskSecret},
		{"RAGENT_LLM_CHAT_MODEL", "", strValue(&c.LLMChatModel), maskNone},
		{"RAGENT_LLM_FAST_MODEL", "", strValue(&c.LLMFastModel), maskNone},
		{"RAGENT_LLM_API_VERSION", "", strValue(&c.LLMAPIVersion), maskNone},
		{"RAGENT_LLM_REGION", "", strValue(&c.LLMRegion), maskNone},
		{"RAGENT_LLM_THINKING", "auto", oneOf(&c.LLMThinking, "auto", "enable_thinking", "off"), maskNone},
		{"RAGENT_LLM_THINKING_MODEL", "", strValue(&c.LLMThinkingModel), maskNone},
		{"RAGENT_LLM_THINKING_BUDGET", "2048", intValue(&c.LLMThinkingBudget), maskNone},
		{"RAGENT_LLM_FALLBACKS_FILE", "", strValue(&c.LLMFallbacksFile), maskNone},
		{"RAGENT_LLM_COOLDOWN", "30s", positiveDuration(&c.LLMCooldown), maskNone},
		{"RAGENT_LLM_FIRST_TOKEN_TIMEOUT", "60s", positiveDuration(&c.LLMFirstTokenTimeout), maskNone},
		{"RAGENT_LLM_IDLE_TIMEOUT", "60s", positiveDuration(&c.LLMIdleTimeout), maskNone},
		{"RAGENT_SEARCH_MIN_VECTOR_SCORE", "", floatValue(&c.SearchMinVectorScore).must(func(f float64) bool { return f <= 1 }, "must be a cosine similarity, at most 1"), maskNone},
		{"RAGENT_SEARCH_FUSION", "", oneOf(&c.SearchFusion, "rrf", "convex"), maskNone},
		{"RAGENT_SEARCH_BACKEND", "postgres", oneOf(&c.SearchBackend, "postgres", "opensearch"), maskNone},
		{"RAGENT_OPENSEARCH_URL", "http://127.0.0.1:9200", strValue(&c.OpenSearchURL), maskURL},
		{"RAGENT_OPENSEARCH_INDEX", "ragent", strValue(&c.OpenSearchIndex), maskNone},
		{"RAGENT_OPENSEARCH_VECTORS", "false", boolValue(&c.OpenSearchVectors), maskNone},
		{"RAGENT_RERANK_MODEL", "", strValue(&c.RerankModel), maskNone},
		{"RAGENT_RERANK_BASE_URL", "", strValue(&c.RerankBaseURL), maskURL},
		{"RAGENT_RERANK_MIN_SCORE", "", optionalFloat{&c.RerankMinScore}, maskNone},
		{"RAGENT_RERANK_REQUESTS_PER_MINUTE", "0", intValue(&c.RerankRequestsPerMinute).must(atLeast(0), "must be 0 (unlimited) or more"), maskNone},
		{"RAGENT_RERANK_TOKENS_PER_MINUTE", "0", intValue(&c.RerankTokensPerMinute).must(atLeast(0), "must be 0 (unlimited) or more"), maskNone},
		{"RAGENT_EMBEDDING_PROVIDER", "offline", oneOf(&c.EmbedProvider, "offline", "openai", "mistral", "ollama", "googleai", "bedrock"), maskNone},
		{"RAGENT_EMBEDDING_MODEL", "", strValue(&c.EmbedModel), maskNone},
		{"RAGENT_EMBEDDING_DIM", "512", intValue(&c.EmbedDim).must(between(1, 4000), "must be between 1 and 4000 (pgvector halfvec limit)"), maskNone},
		{"RAGENT_EMBEDDING_BASE_URL", "", strValue(&c.EmbedBaseURL), maskURL},
		{"RAGENT_EMBEDDING_API_KEY", "", strValue(&c.EmbedAPIKey), maskSecret},
		{"RAGENT_EMBEDDING_QUERY_BASE_URL", "", strValue(&c.EmbedQueryBaseURL), maskURL},
		{"RAGENT_EMBEDDING_BATCH_SIZE", "32", intValue(&c.EmbedBatchSize), maskNone},
		{"RAGENT_EMBEDDING_QUERY_PREFIX", "", strValue(&c.EmbedQueryPrefix), maskNone},
		{"RAGENT_EMBEDDING_DOCUMENT_PREFIX", "", strValue(&c.EmbedDocumentPrefix), maskNone},
		{"RAGENT_EMBEDDING_QUERY_INPUT_TYPE", "", strValue(&c.EmbedQueryInputType), maskNone},
		{"RAGENT_EMBEDDING_DOCUMENT_INPUT_TYPE", "", strValue(&c.EmbedDocumentInputType), maskNone},
		{"RAGENT_EMBEDDING_CONCURRENCY", "4", positiveInt(&c.EmbedConcurrency), maskNone},
		{"RAGENT_EMBEDDING_QUERY_WAIT", "10s", positiveDuration(&c.EmbedQueryWait), maskNone},
		{"RAGENT_EMBEDDING_REQUESTS_PER_MINUTE", "0", intValue(&c.EmbedRequestsPerMinute).must(atLeast(0), "must be 0 (unlimited) or more"), maskNone},
		{"RAGENT_EMBEDDING_TOKENS_PER_MINUTE", "0", intValue(&c.EmbedTokensPerMinute).must(atLeast(0), "must be 0 (unlimited) or more"), maskNone},
		{"RAGENT_LLM_REQUESTS_PER_MINUTE", "0", intValue(&c.LLMRequestsPerMinute).must(atLeast(0), "must be 0 (unlimited) or more"), maskNone},
		{"RAGENT_LLM_TOKENS_PER_MINUTE", "0", intValue(&c.LLMTokensPerMinute).must(atLeast(0), "must be 0 (unlimited) or more"), maskNone},
		{"RAGENT_LLM_TOKEN_RESERVATION", "1024", positiveInt(&c.LLMTokenReservation), maskNone},
	}
}

// accountSettings are the settings of sign-in, sessions, the audit log and single sign-on.
func (c *Config) accountSettings() []setting {
	return []setting{
		{"RAGENT_ADMIN_USERNAME", "admin", strValue(&c.AdminUsername), maskNone},
		{"RAGENT_ADMIN_PASSWORD", "", strValue(&c.AdminPassword), maskSecret},
		{"RAGENT_AUTH_SECRET", "", strValue(&c.AuthSecret).must(func(s string) bool { return s == "" || len(s) >= 32 }, "must be at least 32 characters"), maskSecret},
		{"RAGENT_TOKEN_TTL", "24h", positiveDuration(&c.TokenTTL), maskNone},
		{"RAGENT_LOGIN_MAX_FAILURES", "5", positiveInt(&c.LoginMaxFailures), maskNone},
		{"RAGENT_LOGIN_MAX_FAILURES_PER_USER", "20", positiveInt(&c.LoginMaxFailuresPerUser), maskNone},
		{"RAGENT_LOGIN_FAIL_WINDOW", "15m", positiveDuration(&c.LoginFailWindow), maskNone},
		{"RAGENT_LOGIN_MAX_FAILURES_PER_IP", "100", positiveInt(&c.LoginMaxFailuresPerIP), maskNone},
		{"RAGENT_SESSION_RATE_PER_MINUTE", "600", intValue(&c.SessionRatePerMinute).must(atLeast(0), "must be 0 (no limit) or more"), maskNone},
		// The audit table's trigger refuses to delete younger rows (migration 0016).
		{"RAGENT_AUDIT_LOGIN_RETENTION", "720h", durationValue(&c.AuditLoginRetention).must(zeroOr(atLeast(24*time.Hour)), "must be 0 (keep) or at least 24h"), maskNone},
		{"RAGENT_AUDIT_COALESCE_WINDOW", "1m", durationValue(&c.AuditCoalesceWindow).must(atLeast(time.Duration(0)), "must be 0 (no coalescing) or more"), maskNone},
		{"RAGENT_REDIS_ALLOW_EVICTION", "false", boolValue(&c.RedisAllowEviction), maskNone},
		{"RAGENT_SECURE_COOKIE", "false", boolValue(&c.SecureCookie), maskNone},
		{"RAGENT_PASSWORD_LOGIN", "true", boolValue(&c.PasswordLogin), maskNone},
		{"RAGENT_OIDC_ISSUER", "", strValue(&c.OIDCIssuer), maskNone},
		{"RAGENT_OIDC_CLIENT_ID", "", strValue(&c.OIDCClientID), maskNone},
		{"RAGENT_OIDC_CLIENT_SECRET", "", strValue(&c.OIDCClientSecret), maskSecret},
		{"RAGENT_OIDC_REDIRECT_URL", "", strValue(&c.OIDCRedirectURL), maskNone},
		{"RAGENT_OIDC_SCOPES", "openid,profile,email", listValue(&c.OIDCScopes), maskNone},
		{"RAGENT_OIDC_DISPLAY_NAME", "single sign-on", strValue(&c.OIDCDisplayName), maskNone},
		{"RAGENT_OIDC_USERNAME_CLAIM", "preferred_username", strValue(&c.OIDCUsernameClaim), maskNone},
		{"RAGENT_OIDC_GROUPS_CLAIM", "groups", strValue(&c.OIDCGroupsClaim), maskNone},
		{"RAGENT_OIDC_ADMIN_GROUPS", "", listValue(&c.OIDCAdminGroups), maskNone},
		{"RAGENT_OIDC_RECHECK", "5m", durationValue(&c.OIDCRecheck), maskNone},
		{"RAGENT_OIDC_POST_LOGOUT_URL", "", strValue(&c.OIDCPostLogoutURL), maskNone},
	}
}

// chatSettings are the settings of the chat queue and rates, API keys, MCP sessions, usage and resumable answers.
func (c *Config) chatSettings() []setting {
	return []setting{
		{"RAGENT_CHAT_LIMITER_ENABLED", "true", boolValue(&c.ChatLimiterEnabled), maskNone},
		{"RAGENT_CHAT_MAX_CONCURRENT", "10", positiveInt(&c.ChatMaxConcurrent), maskNone},
		{"RAGENT_CHAT_MAX_WAIT", "15s", positiveDuration(&c.ChatMaxWait), maskNone},
		{"RAGENT_CHAT_LEASE", "30s", positiveDuration(&c.ChatLease).must(atLeast(3*time.Second), "must be at least 3s (it is renewed every min(lease/3, 2s))"), maskNone},
		{"RAGENT_CHAT_POLL_INTERVAL", "200ms", positiveDuration(&c.ChatPollInterval), maskNone},
		{"RAGENT_CHAT_LIMITER_ON_REDIS_ERROR", "reject", oneOf(&c.ChatOnRedisError, "reject", "local"), maskNone},
		{"RAGENT_CHAT_MAX_QUEUE", "1000", positiveInt(&c.ChatMaxQueue), maskNone},
		{"RAGENT_CHAT_MAX_QUEUED_PER_USER", "3", positiveInt(&c.ChatMaxQueuedPerUser), maskNone},
		{"RAGENT_CHAT_MAX_RUNNING_PER_USER", "", intValue(&c.ChatMaxRunningPerUser).must(atLeast(0), "must be at least 1 (unset: half of RAGENT_CHAT_MAX_CONCURRENT)"), maskNone},
		{"RAGENT_CHAT_RATE_PER_MINUTE", "30", intValue(&c.ChatRatePerMinute).must(atLeast(0), "must be 0 (no limit) or more"), maskNone},
		{"RAGENT_API_KEY_RATE_PER_MINUTE", "600", intValue(&c.APIKeyRatePerMinute).must(atLeast(0), "must be 0 (no limit) or more"), maskNone},
		{"RAGENT_API_KEY_MAX_TTL", "8760h", positiveDuration(&c.APIKeyMaxTTL), maskNone},
		{"RAGENT_MCP_MAX_SESSIONS", "1000", positiveInt(&c.MCPMaxSessions), maskNone},
		{"RAGENT_MCP_MAX_SESSIONS_PER_KEY", "20", positiveInt(&c.MCPMaxSessionsPerKey), maskNone},
		{"RAGENT_MCP_SESSION_IDLE", "30m", positiveDuration(&c.MCPSessionIdle), maskNone},
		{"RAGENT_CHAT_EMPTY_RETRIEVAL", "chat", oneOf(&c.ChatEmptyRetrieval, "chat", "refuse"), maskNone},
		{"RAGENT_CHAT_MAX_ANSWER_TOKENS", "4096", positiveInt(&c.ChatMaxAnswerTokens), maskNone},
		{"RAGENT_QUOTAS_ENABLED", "true", boolValue(&c.QuotasEnabled), maskNone},
		{"RAGENT_USAGE_FLUSH_INTERVAL", "1s", positiveDuration(&c.UsageFlushInterval), maskNone},
		// The per-day totals quotas and the usage page read are kept apart
		// (usage_daily), but a month's records should outlive the month.
		{"RAGENT_USAGE_CALL_RETENTION", "2160h", durationValue(&c.UsageCallRetention).must(zeroOr(atLeast(24*time.Hour)), "must be 0 (keep) or at least 24h"), maskNone},
		{"RAGENT_CHAT_DETACHED_TIMEOUT", "2m", durationValue(&c.ChatDetachedTimeout).must(atLeast(time.Duration(0)), "must be 0 (a disconnect stops the answer) or more"), maskNone},
		{"RAGENT_CHAT_RESUME_TTL", "5m", positiveDuration(&c.ChatResumeTTL), maskNone},
		{"RAGENT_CHAT_RESUME_MAX_EVENTS", "10000", positiveInt(&c.ChatResumeMaxEvents), maskNone},
	}
}

// ingestSettings are the settings of uploads, the outbox, URL imports, webhooks, the parser and OCR.
func (c *Config) ingestSettings() []setting {
	return []setting{
		{"RAGENT_UPLOAD_MAX_CONCURRENT", "10", positiveInt(&c.UploadMaxConcurrent), maskNone},
		{"RAGENT_UPLOAD_MAX_WAIT", "5s", positiveDuration(&c.UploadMaxWait), maskNone},
		{"RAGENT_UPLOAD_MAX_BYTES", "52428800", int64Value(&c.UploadMaxBytes).must(atLeast[int64](1), "must be positive"), maskNone},
		{"RAGENT_OUTBOX_RETENTION", "168h", positiveDuration(&c.OutboxRetention), maskNone},
		{"RAGENT_INGEST_PENDING_TIMEOUT", "10m", durationValue(&c.IngestPendingTimeout).must(atLeast(time.Second), "must be at least 1s"), maskNone},
		{"RAGENT_INGEST_CONFIRM_AFTER", "10s", durationValue(&c.IngestConfirmAfter), maskNone},
		{"RAGENT_FETCH_ALLOW_NETWORKS", "", prefixesValue(&c.FetchAllowNetworks), maskNone},
		{"RAGENT_FETCH_TIMEOUT", "30s", positiveDuration(&c.FetchTimeout), maskNone},
		{"RAGENT_FETCH_MIN_REFRESH", "1m", positiveDuration(&c.FetchMinRefresh), maskNone},
		{"RAGENT_FETCH_CONCURRENCY", "8", positiveInt(&c.FetchConcurrency), maskNone},
		{"RAGENT_FETCH_PER_KB", "2", positiveInt(&c.FetchPerKB), maskNone},
		{"RAGENT_WEBHOOK_MAX_ATTEMPTS", "8", positiveInt(&c.WebhookMaxAttempts), maskNone},
		{"RAGENT_WEBHOOK_BACKOFF", "2s", positiveDuration(&c.WebhookBackoff), maskNone},
		{"RAGENT_WEBHOOK_CONCURRENCY", "8", positiveInt(&c.WebhookConcurrency), maskNone},
		{"RAGENT_WEBHOOK_DELIVERY_RETENTION", "720h", positiveDuration(&c.WebhookDeliveryRetention), maskNone},

		{"RAGENT_INGEST_PARSER", "process", strValue(&c.IngestParser).must(in("process", "inprocess"), "must be process or inprocess"), maskNone},
		{"RAGENT_INGEST_PARSE_TIMEOUT", "2m", positiveDuration(&c.IngestParseTimeout), maskNone},
		{"RAGENT_INGEST_PARSER_MEMORY", "1073741824", int64Value(&c.IngestParserMemory).must(atLeast[int64](64<<20), "must be at least 67108864 (64 MiB)"), maskNone},
		{"RAGENT_INGEST_MAX_TEXT_BYTES", "20971520", int64Value(&c.IngestMaxTextBytes).must(atLeast[int64](1), "must be positive"), maskNone},
		{"RAGENT_INGEST_MAX_CHUNKS", "20000", positiveInt(&c.IngestMaxChunks), maskNone},
		{"RAGENT_OCR", "auto", strValue(&c.OCR).must(in(parse.OCRAuto, parse.OCROff), "must be auto or off"), maskNone},
		{"RAGENT_OCR_LANGUAGES", "chi_sim+eng", strValue(&c.OCRLanguages).must(parse.ValidOCRLanguages, "must be Tesseract language names joined by + (e.g. chi_sim+eng)"), maskNone},
		{"RAGENT_OCR_PROCESSES", "2", intValue(&c.OCRProcesses).must(between(1, 16), "must be between 1 and 16"), maskNone},
		{"RAGENT_OCR_PAGE_TIMEOUT", "2m", durationValue(&c.OCRPageTimeout).must(atLeast(time.Second), "must be at least 1s"), maskNone},
	}
}

// instanceSettings are the settings of this instance: its worker id, role, logs and shutdown.
func (c *Config) instanceSettings() []setting {
	return []setting{
		{"RAGENT_WORKER_ID", "-1", intValue(&c.WorkerID).must(between(-1, 1023), "must be between 0 and 1023"), maskNone},
		{"RAGENT_WORKER_LEASE_TTL", "5m", durationValue(&c.WorkerLeaseTTL).must(atLeast(time.Second), "must be at least 1s"), maskNone},
		{"RAGENT_DEMO", "true", boolValue(&c.Demo), maskNone},
		{"RAGENT_ROLE", "all", oneOf(&c.Role, "all", "api", "worker"), maskNone},
		{"RAGENT_INSTANCE_ID", "", strValue(&c.InstanceID), maskNone},
		{"RAGENT_SHUTDOWN_TIMEOUT", "20s", positiveDuration(&c.ShutdownTimeout), maskNone},
		{"RAGENT_LOG_LEVEL", "info", oneOf(&c.LogLevel, "debug", "info", "warn", "error"), maskNone},
		{"RAGENT_PPROF_ADDR", "", strValue(&c.PprofAddr), maskNone},
	}
}

// positiveDuration is a duration setting that must be above 0.
func positiveDuration(p *time.Duration) scalar[time.Duration] {
	return durationValue(p).must(above(time.Duration(0)), "must be positive")
}

// positiveInt is an integer setting that must be at least 1.
func positiveInt(p *int) scalar[int] { return intValue(p).must(atLeast(1), "must be at least 1") }
