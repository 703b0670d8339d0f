package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// validate checks the loaded configuration: each setting against the rules
// of its row in the table (settings), then the rules that relate several
// settings.
func (c Config) validate() []error {
	var errs []error
	for _, s := range c.settings() {
		if v, ok := s.value.(checker); ok {
			errs = append(errs, v.check(s.name)...)
		}
	}
	errs = append(errs, c.validateOIDC()...)
	errs = append(errs, c.validateRedis()...)
	errs = append(errs, c.validateModels()...)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.IngestConfirmAfter < 100*time.Millisecond || c.IngestConfirmAfter > c.IngestPendingTimeout {
		bad("RAGENT_INGEST_CONFIRM_AFTER must be between 100ms and RAGENT_INGEST_PENDING_TIMEOUT")
	}
	if c.LoginMaxFailuresPerUser < c.LoginMaxFailures {
		bad("RAGENT_LOGIN_MAX_FAILURES_PER_USER must be at least RAGENT_LOGIN_MAX_FAILURES")
	}
	return errs
}

// isURL is the rule of the URL settings (a scheme is required).
func isURL(name, u string) error {
	if _, err := url.Parse(u); err != nil || !strings.Contains(u, "://") {
		return fmt.Errorf("%s: not a URL", name)
	}
	return nil
}

// validateRedis checks that Redis is one node, behind Sentinel or a
// Cluster, and fully named.
func (c Config) validateRedis() []error {
	switch sentinel, cluster := len(c.RedisSentinelAddrs) > 0, len(c.RedisClusterAddrs) > 0; {
	case sentinel && cluster:
		return []error{errors.New("RAGENT_REDIS_SENTINEL_ADDRS and RAGENT_REDIS_CLUSTER_ADDRS are both set: Redis runs behind Sentinel or as a Cluster, set one")}
	case sentinel && c.RedisSentinelMaster == "":
		return []error{errors.New("RAGENT_REDIS_SENTINEL_MASTER is required with RAGENT_REDIS_SENTINEL_ADDRS")}
	case !sentinel && (c.RedisSentinelMaster != "" || c.RedisSentinelPassword != ""):
		return []error{errors.New("RAGENT_REDIS_SENTINEL_MASTER and RAGENT_REDIS_SENTINEL_PASSWORD need RAGENT_REDIS_SENTINEL_ADDRS")}
	}
	return nil
}

// validateModels checks that a model provider other than offline is told
// which model to call, and where.
func (c Config) validateModels() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
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
	return errs
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
