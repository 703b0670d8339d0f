package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ragent-go/ragent/api"
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

// value parses into and prints one Config field, like flag.Value.
type value interface {
	Set(string) error
	String() string
}

type mask int

const (
	maskNone   mask = iota
	maskSecret      // logged as *** when set
	maskURL         // logged with its password redacted
)

// settings binds the table to c's fields. Rules that relate several
// settings stay in validate.
func (c *Config) settings() []setting {
	return []setting{
		{"RAGENT_HTTP_ADDR", ":8080", strValue(&c.HTTPAddr), maskNone},
		{"RAGENT_METRICS_ADDR", "127.0.0.1:9464", strValue(&c.MetricsAddr), maskNone},
		{"RAGENT_METRICS_PUBLIC", "false", boolValue(&c.MetricsPublic), maskNone},
		{"RAGENT_TRUSTED_PROXIES", "", (*prefixesValue)(&c.TrustedProxies), maskNone},
		{"RAGENT_ALLOWED_ORIGINS", "", (*originsValue)(&c.AllowedOrigins), maskNone},
		{"RAGENT_HTTP_BODY_TIMEOUT", "30s", durationValue(&c.HTTPBodyTimeout), maskNone},
		{"RAGENT_HTTP_UPLOAD_TIMEOUT", "", durationValue(&c.HTTPUploadTimeout), maskNone},
		{"RAGENT_SSE_KEEPALIVE", "15s", durationValue(&c.SSEKeepAlive), maskNone},
		{"RAGENT_DATABASE_URL", "postgres://ragent:ragent@127.0.0.1:5432/ragent?sslmode=disable", strValue(&c.DatabaseURL), maskURL},
		{"RAGENT_REDIS_URL", "redis://127.0.0.1:6379/0", strValue(&c.RedisURL), maskURL},
		{"RAGENT_REDIS_PREFIX", "ragent:", strValue(&c.RedisPrefix), maskNone},
		{"RAGENT_REDIS_SENTINEL_ADDRS", "", (*addrsValue)(&c.RedisSentinelAddrs), maskNone},
		{"RAGENT_REDIS_SENTINEL_MASTER", "", strValue(&c.RedisSentinelMaster), maskNone},
		{"RAGENT_REDIS_SENTINEL_PASSWORD", "", strValue(&c.RedisSentinelPassword), maskSecret},
		{"RAGENT_REDIS_CLUSTER_ADDRS", "", (*addrsValue)(&c.RedisClusterAddrs), maskNone},

		{"RAGENT_MQ_DRIVER", "redis", strValue(&c.MQDriver), maskNone},
		{"RAGENT_ROCKETMQ_NAMESRV", "127.0.0.1:9876", strValue(&c.RocketMQNamesrv), maskNone},
		{"RAGENT_ROCKETMQ_BROKER", "127.0.0.1:10911", strValue(&c.RocketMQBroker), maskNone},
		{"RAGENT_MQ_VISIBILITY_TIMEOUT", "1m", durationValue(&c.MQVisibilityTimeout), maskNone},

		{"RAGENT_LLM_PROVIDER", "offline", strValue(&c.LLMProvider), maskNone},
		{"RAGENT_LLM_BASE_URL", "", strValue(&c.LLMBaseURL), maskURL},
		{"RAGENT_LLM_API_KEY", "", strValue(&c.LLMAPIKey), maskSecret},
		{"RAGENT_LLM_CHAT_MODEL", "", strValue(&c.LLMChatModel), maskNone},
		{"RAGENT_LLM_FAST_MODEL", "", strValue(&c.LLMFastModel), maskNone},
		{"RAGENT_LLM_API_VERSION", "", strValue(&c.LLMAPIVersion), maskNone},
		{"RAGENT_LLM_REGION", "", strValue(&c.LLMRegion), maskNone},
		{"RAGENT_LLM_THINKING", "auto", strValue(&c.LLMThinking), maskNone},
		{"RAGENT_LLM_THINKING_MODEL", "", strValue(&c.LLMThinkingModel), maskNone},
		{"RAGENT_LLM_THINKING_BUDGET", "2048", intValue(&c.LLMThinkingBudget), maskNone},
		{"RAGENT_LLM_FALLBACKS_FILE", "", strValue(&c.LLMFallbacksFile), maskNone},
		{"RAGENT_LLM_COOLDOWN", "30s", durationValue(&c.LLMCooldown), maskNone},
		{"RAGENT_LLM_FIRST_TOKEN_TIMEOUT", "60s", durationValue(&c.LLMFirstTokenTimeout), maskNone},
		{"RAGENT_LLM_IDLE_TIMEOUT", "60s", durationValue(&c.LLMIdleTimeout), maskNone},
		{"RAGENT_SEARCH_MIN_VECTOR_SCORE", "", floatValue(&c.SearchMinVectorScore), maskNone},
		{"RAGENT_SEARCH_FUSION", "", strValue(&c.SearchFusion), maskNone},
		{"RAGENT_SEARCH_BACKEND", "postgres", strValue(&c.SearchBackend), maskNone},
		{"RAGENT_OPENSEARCH_URL", "http://127.0.0.1:9200", strValue(&c.OpenSearchURL), maskURL},
		{"RAGENT_OPENSEARCH_INDEX", "ragent", strValue(&c.OpenSearchIndex), maskNone},
		{"RAGENT_OPENSEARCH_VECTORS", "false", boolValue(&c.OpenSearchVectors), maskNone},
		{"RAGENT_RERANK_MODEL", "", strValue(&c.RerankModel), maskNone},
		{"RAGENT_RERANK_BASE_URL", "", strValue(&c.RerankBaseURL), maskURL},
		{"RAGENT_RERANK_MIN_SCORE", "", optionalFloat{&c.RerankMinScore}, maskNone},
		{"RAGENT_EMBEDDING_PROVIDER", "offline", strValue(&c.EmbedProvider), maskNone},
		{"RAGENT_EMBEDDING_MODEL", "", strValue(&c.EmbedModel), maskNone},
		{"RAGENT_EMBEDDING_DIM", "512", intValue(&c.EmbedDim), maskNone},
		{"RAGENT_EMBEDDING_BASE_URL", "", strValue(&c.EmbedBaseURL), maskURL},
		{"RAGENT_EMBEDDING_API_KEY", "", strValue(&c.EmbedAPIKey), maskSecret},
		{"RAGENT_EMBEDDING_QUERY_BASE_URL", "", strValue(&c.EmbedQueryBaseURL), maskURL},
		{"RAGENT_EMBEDDING_BATCH_SIZE", "32", intValue(&c.EmbedBatchSize), maskNone},
		{"RAGENT_EMBEDDING_QUERY_PREFIX", "", strValue(&c.EmbedQueryPrefix), maskNone},
		{"RAGENT_EMBEDDING_DOCUMENT_PREFIX", "", strValue(&c.EmbedDocumentPrefix), maskNone},
		{"RAGENT_EMBEDDING_QUERY_INPUT_TYPE", "", strValue(&c.EmbedQueryInputType), maskNone},
		{"RAGENT_EMBEDDING_DOCUMENT_INPUT_TYPE", "", strValue(&c.EmbedDocumentInputType), maskNone},
		{"RAGENT_EMBEDDING_CONCURRENCY", "4", intValue(&c.EmbedConcurrency), maskNone},
		{"RAGENT_EMBEDDING_QUERY_WAIT", "10s", durationValue(&c.EmbedQueryWait), maskNone},

		{"RAGENT_ADMIN_USERNAME", "admin", strValue(&c.AdminUsername), maskNone},
		{"RAGENT_ADMIN_PASSWORD", "", strValue(&c.AdminPassword), maskSecret},
		{"RAGENT_AUTH_SECRET", "", strValue(&c.AuthSecret), maskSecret},
		{"RAGENT_TOKEN_TTL", "24h", durationValue(&c.TokenTTL), maskNone},
		{"RAGENT_LOGIN_MAX_FAILURES", "5", intValue(&c.LoginMaxFailures), maskNone},
		{"RAGENT_LOGIN_MAX_FAILURES_PER_USER", "20", intValue(&c.LoginMaxFailuresPerUser), maskNone},
		{"RAGENT_LOGIN_FAIL_WINDOW", "15m", durationValue(&c.LoginFailWindow), maskNone},
		{"RAGENT_LOGIN_MAX_FAILURES_PER_IP", "100", intValue(&c.LoginMaxFailuresPerIP), maskNone},
		{"RAGENT_SESSION_RATE_PER_MINUTE", "600", intValue(&c.SessionRatePerMinute), maskNone},
		{"RAGENT_AUDIT_LOGIN_RETENTION", "720h", durationValue(&c.AuditLoginRetention), maskNone},
		{"RAGENT_AUDIT_COALESCE_WINDOW", "1m", durationValue(&c.AuditCoalesceWindow), maskNone},
		{"RAGENT_REDIS_ALLOW_EVICTION", "false", boolValue(&c.RedisAllowEviction), maskNone},
		{"RAGENT_SECURE_COOKIE", "false", boolValue(&c.SecureCookie), maskNone},
		{"RAGENT_PASSWORD_LOGIN", "true", boolValue(&c.PasswordLogin), maskNone},
		{"RAGENT_OIDC_ISSUER", "", strValue(&c.OIDCIssuer), maskNone},
		{"RAGENT_OIDC_CLIENT_ID", "", strValue(&c.OIDCClientID), maskNone},
		{"RAGENT_OIDC_CLIENT_SECRET", "", strValue(&c.OIDCClientSecret), maskSecret},
		{"RAGENT_OIDC_REDIRECT_URL", "", strValue(&c.OIDCRedirectURL), maskNone},
		{"RAGENT_OIDC_SCOPES", "openid,profile,email", (*listValue)(&c.OIDCScopes), maskNone},
		{"RAGENT_OIDC_DISPLAY_NAME", "single sign-on", strValue(&c.OIDCDisplayName), maskNone},
		{"RAGENT_OIDC_USERNAME_CLAIM", "preferred_username", strValue(&c.OIDCUsernameClaim), maskNone},
		{"RAGENT_OIDC_GROUPS_CLAIM", "groups", strValue(&c.OIDCGroupsClaim), maskNone},
		{"RAGENT_OIDC_ADMIN_GROUPS", "", (*listValue)(&c.OIDCAdminGroups), maskNone},
		{"RAGENT_OIDC_RECHECK", "5m", durationValue(&c.OIDCRecheck), maskNone},
		{"RAGENT_OIDC_POST_LOGOUT_URL", "", strValue(&c.OIDCPostLogoutURL), maskNone},

		{"RAGENT_CHAT_LIMITER_ENABLED", "true", boolValue(&c.ChatLimiterEnabled), maskNone},
		{"RAGENT_CHAT_MAX_CONCURRENT", "10", intValue(&c.ChatMaxConcurrent), maskNone},
		{"RAGENT_CHAT_MAX_WAIT", "15s", durationValue(&c.ChatMaxWait), maskNone},
		{"RAGENT_CHAT_LEASE", "30s", durationValue(&c.ChatLease), maskNone},
		{"RAGENT_CHAT_POLL_INTERVAL", "200ms", durationValue(&c.ChatPollInterval), maskNone},
		{"RAGENT_CHAT_LIMITER_ON_REDIS_ERROR", "reject", strValue(&c.ChatOnRedisError), maskNone},
		{"RAGENT_CHAT_MAX_QUEUE", "1000", intValue(&c.ChatMaxQueue), maskNone},
		{"RAGENT_CHAT_MAX_QUEUED_PER_USER", "3", intValue(&c.ChatMaxQueuedPerUser), maskNone},
		{"RAGENT_CHAT_MAX_RUNNING_PER_USER", "", intValue(&c.ChatMaxRunningPerUser), maskNone},
		{"RAGENT_CHAT_RATE_PER_MINUTE", "30", intValue(&c.ChatRatePerMinute), maskNone},
		{"RAGENT_API_KEY_RATE_PER_MINUTE", "600", intValue(&c.APIKeyRatePerMinute), maskNone},
		{"RAGENT_API_KEY_MAX_TTL", "8760h", durationValue(&c.APIKeyMaxTTL), maskNone},
		{"RAGENT_MCP_MAX_SESSIONS", "1000", intValue(&c.MCPMaxSessions), maskNone},
		{"RAGENT_MCP_MAX_SESSIONS_PER_KEY", "20", intValue(&c.MCPMaxSessionsPerKey), maskNone},
		{"RAGENT_MCP_SESSION_IDLE", "30m", durationValue(&c.MCPSessionIdle), maskNone},
		{"RAGENT_CHAT_EMPTY_RETRIEVAL", "chat", strValue(&c.ChatEmptyRetrieval), maskNone},
		{"RAGENT_CHAT_MAX_ANSWER_TOKENS", "4096", intValue(&c.ChatMaxAnswerTokens), maskNone},
		{"RAGENT_QUOTAS_ENABLED", "true", boolValue(&c.QuotasEnabled), maskNone},
		{"RAGENT_USAGE_FLUSH_INTERVAL", "1s", durationValue(&c.UsageFlushInterval), maskNone},
		{"RAGENT_CHAT_DETACHED_TIMEOUT", "2m", durationValue(&c.ChatDetachedTimeout), maskNone},
		{"RAGENT_CHAT_RESUME_TTL", "5m", durationValue(&c.ChatResumeTTL), maskNone},
		{"RAGENT_CHAT_RESUME_MAX_EVENTS", "10000", intValue(&c.ChatResumeMaxEvents), maskNone},

		{"RAGENT_UPLOAD_MAX_CONCURRENT", "10", intValue(&c.UploadMaxConcurrent), maskNone},
		{"RAGENT_UPLOAD_MAX_WAIT", "5s", durationValue(&c.UploadMaxWait), maskNone},
		{"RAGENT_UPLOAD_MAX_BYTES", "52428800", int64Value(&c.UploadMaxBytes), maskNone},
		{"RAGENT_OUTBOX_RETENTION", "168h", durationValue(&c.OutboxRetention), maskNone},
		{"RAGENT_INGEST_PENDING_TIMEOUT", "10m", durationValue(&c.IngestPendingTimeout), maskNone},
		{"RAGENT_FETCH_ALLOW_NETWORKS", "", (*prefixesValue)(&c.FetchAllowNetworks), maskNone},
		{"RAGENT_FETCH_TIMEOUT", "30s", durationValue(&c.FetchTimeout), maskNone},
		{"RAGENT_FETCH_MIN_REFRESH", "1m", durationValue(&c.FetchMinRefresh), maskNone},
		{"RAGENT_FETCH_CONCURRENCY", "8", intValue(&c.FetchConcurrency), maskNone},
		{"RAGENT_FETCH_PER_KB", "2", intValue(&c.FetchPerKB), maskNone},
		{"RAGENT_WEBHOOK_MAX_ATTEMPTS", "8", intValue(&c.WebhookMaxAttempts), maskNone},
		{"RAGENT_WEBHOOK_BACKOFF", "2s", durationValue(&c.WebhookBackoff), maskNone},
		{"RAGENT_WEBHOOK_CONCURRENCY", "8", intValue(&c.WebhookConcurrency), maskNone},
		{"RAGENT_WEBHOOK_DELIVERY_RETENTION", "720h", durationValue(&c.WebhookDeliveryRetention), maskNone},

		{"RAGENT_INGEST_PARSER", "process", strValue(&c.IngestParser), maskNone},
		{"RAGENT_INGEST_PARSE_TIMEOUT", "2m", durationValue(&c.IngestParseTimeout), maskNone},
		{"RAGENT_INGEST_PARSER_MEMORY", "1073741824", int64Value(&c.IngestParserMemory), maskNone},
		{"RAGENT_INGEST_MAX_TEXT_BYTES", "20971520", int64Value(&c.IngestMaxTextBytes), maskNone},
		{"RAGENT_INGEST_MAX_CHUNKS", "20000", intValue(&c.IngestMaxChunks), maskNone},

		{"RAGENT_WORKER_ID", "-1", intValue(&c.WorkerID), maskNone},
		{"RAGENT_WORKER_LEASE_TTL", "5m", durationValue(&c.WorkerLeaseTTL), maskNone},
		{"RAGENT_DEMO", "true", boolValue(&c.Demo), maskNone},
		{"RAGENT_ROLE", "all", strValue(&c.Role), maskNone},
		{"RAGENT_INSTANCE_ID", "", strValue(&c.InstanceID), maskNone},
		{"RAGENT_SHUTDOWN_TIMEOUT", "20s", durationValue(&c.ShutdownTimeout), maskNone},
		{"RAGENT_LOG_LEVEL", "info", strValue(&c.LogLevel), maskNone},
		{"RAGENT_PPROF_ADDR", "", strValue(&c.PprofAddr), maskNone},
	}
}

// scalar is a setting of a basic type: parse reads it (a failure says what
// the value must be: want), format prints it back.
type scalar[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
	want   string
}

func (v scalar[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return errors.New(v.want)
	}
	*v.p = x
	return nil
}

func (v scalar[T]) String() string { return v.format(*v.p) }

func strValue(p *string) value {
	same := func(s string) string { return s }
	return scalar[string]{p, func(s string) (string, error) { return s, nil }, same, ""}
}

func intValue(p *int) value { return scalar[int]{p, strconv.Atoi, strconv.Itoa, "not an integer"} }

func int64Value(p *int64) value {
	parse := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	format := func(n int64) string { return strconv.FormatInt(n, 10) }
	return scalar[int64]{p, parse, format, "not an integer"}
}

func floatValue(p *float64) value {
	parse := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	format := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	return scalar[float64]{p, parse, format, "not a number"}
}

// optionalFloat is a number that may be left unset (nil).
type optionalFloat struct{ p **float64 }

func (v optionalFloat) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v.p = &f
	return nil
}

func (v optionalFloat) String() string {
	if *v.p == nil {
		return ""
	}
	return strconv.FormatFloat(**v.p, 'g', -1, 64)
}

func boolValue(p *bool) value {
	return scalar[bool]{p, strconv.ParseBool, strconv.FormatBool, "not a boolean"}
}

func durationValue(p *time.Duration) value {
	return scalar[time.Duration]{p, time.ParseDuration, time.Duration.String, "not a duration (e.g. 15s)"}
}

// prefixesValue is a comma-separated list of CIDRs; a bare IP stands for
// itself alone.
type prefixesValue []netip.Prefix

func (v *prefixesValue) Set(s string) error {
	var out []netip.Prefix
	var errs []error
	for _, item := range splitList(s) {
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(item); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		errs = append(errs, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8) or an IP", item))
	}
	*v = out
	return errors.Join(errs...)
}

func (v *prefixesValue) String() string {
	var s []string
	for _, p := range *v {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// originsValue is a comma-separated list of origins (scheme://host[:port]).
type originsValue []string

func (v *originsValue) Set(s string) error {
	var out []string
	var errs []error
	for _, item := range splitList(s) {
		o, ok := api.NormalizeOrigin(item)
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not an origin (scheme://host[:port], no path)", item))
			continue
		}
		out = append(out, o)
	}
	*v = out
	return errors.Join(errs...)
}

func (v *originsValue) String() string { return strings.Join(*v, ",") }

// addrsValue is a comma-separated list of host:port addresses.
type addrsValue []string

func (v *addrsValue) Set(s string) error {
	var out []string
	var errs []error
	for _, item := range splitList(s) {
		if _, port, err := net.SplitHostPort(item); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%q is not host:port", item))
			continue
		}
		out = append(out, item)
	}
	*v = out
	return errors.Join(errs...)
}

func (v *addrsValue) String() string { return strings.Join(*v, ",") }

// listValue is a comma-separated list (spaces around items dropped).
type listValue []string

func (v *listValue) Set(s string) error {
	*v = splitList(s)
	return nil
}

func (v *listValue) String() string { return strings.Join(*v, ",") }

// splitList splits a comma-separated value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
