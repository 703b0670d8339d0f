// Package api is ragent's HTTP adapter: the Gin router, handlers, middleware,
// the SSE writer and the map from error codes (service.CodeOf) to HTTP
// statuses. It also serves the embedded web UI and the OpenAI-compatible
// API (/v1, openai.go), which translates the chat pipeline's events into
// OpenAI's wire format.
//
// api reaches data only through use cases (service/...) and mechanisms
// (ratelimit, idempotent); dependencies it must check for readiness are
// passed in as Pingers.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/auth"
	"github.com/ragent-go/ragent/service/chat"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/service/usage"
)

// Pinger reports whether a dependency is reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PingFunc adapts a function to Pinger.
type PingFunc func(ctx context.Context) error

// Ping calls f.
func (f PingFunc) Ping(ctx context.Context) error { return f(ctx) }

// Deps is everything the HTTP layer needs, built by cmd/ragent.
type Deps struct {
	Log  *slog.Logger
	Auth *auth.Service
	// SSO is single sign-on (docs/sso.md); nil: off.
	SSO *auth.SSO
	// SSOName is the provider's name on the login page's button.
	SSOName string
	// PasswordLoginOff tells the login page that only the break-glass
	// admin signs in with a password (the use case enforces it).
	PasswordLoginOff bool
	APIKeys          *auth.APIKeys   // nil: bearer tokens starting rk_ are refused
	KeyRate          *ratelimit.Rate // requests per API key; nil: no limit
	// WidgetRate counts widget chats per visitor and per origin, each with
	// its key's own limit per minute (Rate.AllowLimit); nil: no limit.
	WidgetRate     *ratelimit.Rate
	SessionRate    *ratelimit.Rate // requests per user with session tokens; nil: no limit
	KnowledgeBases *admin.KnowledgeBases
	Groups         *admin.Groups
	// Quotas checks usage quotas before chats and searches and answers
	// usage reports; nil: no quotas, no /usage.
	Quotas       *usage.Quotas
	Ingest       *ingest.Service
	Search       *retrieve.Searcher
	Chat         *chat.Service
	PingInterval time.Duration // SSE keep-alive; default 15s
	Intents      *admin.Intents
	Terms        *admin.Terms
	Audit        *admin.Audit
	// Auditor records refusals the router makes before a use case runs
	// (a non-admin on an admin-only change); nil records none.
	Auditor *service.Auditor

	// Idempotent submit (s.submitLock, s.idempotent); nil disables each part.
	Locks     *idempotent.Locks
	Responses *idempotent.Responses

	UploadSemaphore   *ratelimit.Semaphore // nil: uploads are not bounded
	UploadMaxWait     time.Duration        // Retry-After hint of a refused upload
	ChatLimiter       LimiterStats         // nil when the limiter is disabled
	ChatMaxConcurrent int
	Pingers           map[string]Pinger // checked by /readyz
	Registry          *prometheus.Registry

	MaxBodyBytes   int64         // JSON body cap; default 1 MiB
	UploadMaxBytes int64         // upload cap; default 50 MiB
	SecureCookie   bool          // set Secure on the session cookie (behind TLS)
	ReadyTimeout   time.Duration // per dependency; default 2s

	// TrustedProxies are the peers whose X-Forwarded-For, X-Real-IP and
	// X-Forwarded-Proto are believed; with none, the client IP is the TCP
	// peer (the headers are anyone's to forge).
	TrustedProxies []netip.Prefix
	// AllowedOrigins (normalized, see NormalizeOrigin) may send
	// cookie-authenticated writes besides the request's own origin.
	AllowedOrigins []string
	// BodyTimeout bounds reading a request body (default 30s);
	// UploadBodyTimeout an upload's (default BodyTimeout + 10 minutes).
	BodyTimeout       time.Duration
	UploadBodyTimeout time.Duration
	// MCP, when set, serves /mcp (the MCP server, package api/mcp), which
	// authenticates API keys itself: it needs this router's request id,
	// client IP, metrics and recovery, not its session middleware.
	MCP http.Handler
	// MetricsElsewhere leaves /metrics off this router, the default: cmd
	// serves it on its own listener (RAGENT_METRICS_ADDR) and here only
	// with RAGENT_METRICS_PUBLIC=true.
	MetricsElsewhere bool
}

// uploadRoute is the one route whose body is multipart and may be large.
const uploadRoute = "/api/v1/knowledge-bases/:id/documents"

// Server holds the handlers' dependencies.
type Server struct {
	deps    Deps
	started time.Time // the "created" time of the model "ragent" (GET /v1/models)
	// sessionRateWarn limits the warning of an unreachable session rate.
	sessionRateWarn everyInterval
}

// Router is the HTTP handler of the whole API, the metrics endpoint and the
// web UI.
type Router struct {
	*gin.Engine
}

// Route is a registered method and path.
type Route struct{ Method, Path string }

// Routes lists every registered route (tests check each one's access rules).
func (r *Router) Routes() []Route {
	var out []Route
	for _, ri := range r.Engine.Routes() {
		// Gin keeps a literal colon escaped (documents\:import) until it
		// serves its first request; requests see the plain path.
		out = append(out, Route{ri.Method, strings.ReplaceAll(ri.Path, `\:`, ":")})
	}
	return out
}

// NewRouter builds the router. Every route is registered here, area by
// area: the probes, sign-in, the account, knowledge, chat, administration,
// the widget, the OpenAI-compatible API and MCP.
func NewRouter(deps Deps) *Router {
	deps = deps.withDefaults()
	s := &Server{deps: deps, started: time.Now(), sessionRateWarn: everyInterval{every: time.Minute}}
	r := newEngine(deps)
	s.routeProbes(r)

	v1 := r.Group("/api/v1")
	v1.POST("/auth/login", s.login)
	v1.GET("/auth/providers", s.authProviders)
	v1.GET("/auth/oidc/login", s.oidcLogin)
	v1.GET("/auth/oidc/callback", s.oidcCallback)

	user := v1.Group("", s.authenticate, s.csrfGuard(uploadRoute))
	s.routeAccount(user)
	s.routeKnowledge(user)
	s.routeChat(user)
	s.routeAdmin(user.Group("", s.requireAdmin))

	// The chat widget (widget.go): its script and the three routes a
	// public widget key reaches.
	s.registerWidget(r, s.gated)

	// The OpenAI-compatible API (openai.go) for API keys with the chat scope
	// and sessions; the CSRF guard applies to cookie sessions as on /api/v1.
	// No submit lock on completions: OpenAI's SDKs retry by themselves, and
	// a bot asks the same question for different people at once.
	oai := r.Group("/v1", openAIErrors, s.authenticate, s.csrfGuard(uploadRoute))
	oai.GET("/models", s.listModels)
	oai.POST("/chat/completions", s.gated(s.chatCompletions)...)

	if deps.MCP != nil {
		mcp := gin.WrapH(deps.MCP)
		r.GET("/mcp", mcp)
		r.POST("/mcp", mcp)
		r.DELETE("/mcp", mcp)
	}

	return &Router{r}
}

// withDefaults fills in the limits and helpers a caller left unset.
func (deps Deps) withDefaults() Deps {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.MaxBodyBytes <= 0 {
		deps.MaxBodyBytes = 1 << 20
	}
	if deps.PingInterval <= 0 {
		deps.PingInterval = 15 * time.Second
	}
	if deps.UploadMaxBytes <= 0 {
		deps.UploadMaxBytes = 50 << 20
	}
	if deps.ReadyTimeout <= 0 {
		deps.ReadyTimeout = 2 * time.Second
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	if deps.BodyTimeout <= 0 {
		deps.BodyTimeout = 30 * time.Second
	}
	if deps.UploadBodyTimeout <= 0 {
		deps.UploadBodyTimeout = deps.BodyTimeout + 10*time.Minute
	}
	return deps
}

// newEngine is the Gin engine with the middleware every route passes
// through and the errors of unknown routes and methods.
func newEngine(deps Deps) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	// Gin believes X-Forwarded-For from any peer unless told otherwise; the
	// prefixes are valid by construction, so this cannot fail.
	proxies := make([]string, 0, len(deps.TrustedProxies))
	for _, p := range deps.TrustedProxies {
		proxies = append(proxies, p.String())
	}
	if err := r.SetTrustedProxies(proxies); err != nil {
		panic(err)
	}
	r.Use(requestID(deps.Log), recovery(), newHTTPMetrics(deps.Registry).handler(), accessLog(),
		securityHeaders, bodyDeadline(deps.BodyTimeout, deps.UploadBodyTimeout, uploadRoute))
	// Under /v1/ (the OpenAI-compatible API) errors take OpenAI's shape.
	r.NoRoute(func(c *gin.Context) {
		if strings.HasPrefix(c.Request.URL.Path, "/v1/") {
			c.Set(ctxOpenAI, true)
		}
		failCode(c, http.StatusNotFound, "not_found", "no such route")
	})
	r.NoMethod(func(c *gin.Context) {
		if strings.HasPrefix(c.Request.URL.Path, "/v1/") {
			c.Set(ctxOpenAI, true)
		}
		failCode(c, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
	})

	return r
}

// routeProbes registers the health and readiness probes, the web app and,
// unless it is served elsewhere, /metrics.
func (s *Server) routeProbes(r *gin.Engine) {
	deps := s.deps
	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	serveWeb(r)
	if !deps.MetricsElsewhere {
		r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(deps.Registry, promhttp.HandlerOpts{Registry: deps.Registry})))
	}
}

// routeAccount registers what a signed-in user does with their own
// account: sessions, password, API and widget keys.
func (s *Server) routeAccount(user *gin.RouterGroup) {
	deps := s.deps
	user.POST("/auth/logout", s.logout)
	user.POST("/auth/logout-all", s.endSessions(deps.Auth.LogoutEverywhere))
	user.GET("/me", s.me)
	user.GET("/limits", s.limits)
	user.POST("/me/password", s.changePassword)
	// API keys: each user manages their own, admins everyone's; keys
	// themselves are refused here (keyScopes). Creation takes the submit
	// lock but never stores its response for Idempotency-Key replay: the
	// response is the key, which is kept nowhere.
	user.GET("/api-keys", page(deps.APIKeys.List, apiKeyCursor))
	user.POST("/api-keys", s.submitLock, noStore, withBody(s, http.StatusCreated, deps.APIKeys.Create))
	user.DELETE("/api-keys/:id", deleteByID(deps.APIKeys.Revoke))
	// Widget keys (widget.go) are listed and revoked with the API keys;
	// only admins create them (in the service).
	user.POST("/widget-keys", s.submitLock, noStore, withBody(s, http.StatusCreated, deps.APIKeys.CreateWidget))
}

// routeKnowledge registers knowledge bases, their members, documents,
// webhooks and chunks.
func (s *Server) routeKnowledge(user *gin.RouterGroup) {
	deps := s.deps
	// Knowledge bases and documents: every logged-in user reaches these;
	// the service layer decides per knowledge base (service.Access):
	// unreadable → 404, readable with too small a role → 403.
	user.GET("/knowledge-bases", page(deps.KnowledgeBases.List, knowledgeBaseCursor))
	user.POST("/knowledge-bases", s.idempotentAfter(adminOnly), withBody(s, http.StatusCreated, deps.KnowledgeBases.Create)) // admins only, in the service
	user.GET("/knowledge-bases/:id", byID(http.StatusOK, deps.KnowledgeBases.Get))
	user.PATCH("/knowledge-bases/:id", s.idempotentAfter(s.kbRole(service.KBManager)), withIDBody(s, http.StatusOK, deps.KnowledgeBases.Update))
	user.DELETE("/knowledge-bases/:id", deleteByID(deps.KnowledgeBases.Delete))
	user.GET("/knowledge-bases/:id/members", all(deps.KnowledgeBases.Members))
	user.POST("/knowledge-bases/:id/members", s.idempotentAfter(s.kbRole(service.KBManager)), s.putMember)
	user.DELETE("/knowledge-bases/:id/members/:memberId", deleteChild("memberId", deps.KnowledgeBases.RemoveMember))
	user.GET("/knowledge-bases/:id/documents", s.listDocuments)
	upload := []gin.HandlerFunc{s.uploadDocument}
	if deps.UploadSemaphore != nil {
		upload = append([]gin.HandlerFunc{uploadGate(deps.UploadSemaphore, deps.UploadMaxWait)}, upload...)
	}
	user.POST("/knowledge-bases/:id/documents", append([]gin.HandlerFunc{s.checkUpload}, upload...)...)
	// Pipelines (docs/pipelines.md "For pipelines"): lookup and status polling are
	// the listing's filters; the import is fetched by a worker.
	user.DELETE("/knowledge-bases/:id/documents", s.deleteDocumentByExternalID)
	user.POST(`/knowledge-bases/:id/documents\:import`, s.idempotentAfter(s.kbRole(service.KBEditor)), withIDBody(s, http.StatusAccepted, s.importDocument))
	// Webhooks are knowledge-base settings: managers, no API keys.
	user.GET("/knowledge-bases/:id/webhooks", all(deps.Ingest.Webhooks))
	user.POST("/knowledge-bases/:id/webhooks", s.submitLock, noStore, withIDBody(s, http.StatusCreated, s.createWebhook))
	user.DELETE("/knowledge-bases/:id/webhooks/:webhookId", deleteChild("webhookId", deps.Ingest.DeleteWebhook))
	user.GET("/documents/:id", byID(http.StatusOK, deps.Ingest.Document))
	user.DELETE("/documents/:id", deleteByID(deps.Ingest.Delete))
	user.POST("/documents/:id/reindex", byID(http.StatusAccepted, deps.Ingest.Reindex))
	user.GET("/documents/:id/chunks", s.documentChunks)
	// Chunk curation (README "Curating chunks"): editors of the chunk's
	// knowledge base, checked by the ingest use case.
	user.POST("/documents/:id/chunks", s.submitLock, withIDBody(s, http.StatusCreated, deps.Ingest.AddChunk))
	user.POST("/knowledge-bases/:id/chunks", s.submitLock, withIDBody(s, http.StatusCreated, deps.Ingest.AddManualChunk))
	user.PATCH("/chunks/:id", s.submitLock, withIDBody(s, http.StatusOK, deps.Ingest.UpdateChunk))
	user.DELETE("/chunks/:id", deleteByID(deps.Ingest.DeleteChunk))
	user.GET("/chunks/:id/revisions", all(deps.Ingest.ChunkRevisions))
	user.GET("/documents/:id/deleted-chunks", all(deps.Ingest.DeletedChunks))
	user.POST("/chunks/:id/revisions/:revision/restore", s.submitLock, s.restoreChunk)
}

// gated puts the quota check before h, when quotas are on: a refused
// request writes nothing.
func (s *Server) gated(h ...gin.HandlerFunc) []gin.HandlerFunc {
	if s.deps.Quotas == nil {
		return h
	}
	return append([]gin.HandlerFunc{s.quotaGate}, h...)
}

// routeChat registers search, chat, its tasks, conversations and answer
// feedback.
func (s *Server) routeChat(user *gin.RouterGroup) {
	deps := s.deps
	user.POST("/search", s.gated(withBody(s, http.StatusOK, s.search))...)
	user.POST("/chat", s.gated(s.submitLock, s.chatStream)...)
	if deps.Quotas != nil {
		user.GET("/usage", s.usageReport)
	}
	user.POST("/chat/tasks/:taskId/stop", s.submitLock, s.stopChat)
	user.GET("/chat/tasks/:taskId/events", s.chatEvents)
	user.GET("/conversations", page(deps.Chat.Conversations, conversationCursor))
	user.GET("/conversations/:id/messages", s.conversationMessages)
	user.PATCH("/conversations/:id", withIDBody(s, http.StatusOK, s.renameConversation))
	user.DELETE("/conversations/:id", deleteByID(deps.Chat.Delete))
	// Answer feedback (README "Answer feedback"): whoever sees the
	// answer's conversation rates it; admins read, judge and export.
	user.POST("/messages/:id/feedback", s.submitLock, s.rateMessage)
}

// routeAdmin registers the administrators' routes: users, groups, the
// limiter, quotas, intents, term mappings, the audit log and feedback.
func (s *Server) routeAdmin(adm *gin.RouterGroup) {
	deps := s.deps
	adm.GET("/users", page(deps.Auth.ListUsers, userCursor))
	adm.POST("/users", s.idempotent, withBody(s, http.StatusCreated, deps.Auth.CreateUser))
	adm.PATCH("/users/:id", s.idempotent, withIDBody(s, http.StatusOK, deps.Auth.UpdateUser))
	adm.DELETE("/users/:id", deleteByID(deps.Auth.DeleteUser))

	adm.GET("/groups", page(deps.Groups.List, groupCursor))
	adm.POST("/groups", s.idempotent, withBody(s, http.StatusCreated, deps.Groups.Create))
	adm.PATCH("/groups/:id", s.idempotent, withIDBody(s, http.StatusOK, deps.Groups.Update))
	adm.DELETE("/groups/:id", deleteByID(deps.Groups.Delete))
	adm.GET("/groups/:id/members", all(deps.Groups.Members))
	adm.POST("/groups/:id/members", s.idempotent, withIDBody(s, http.StatusCreated, deps.Groups.AddMember))
	adm.DELETE("/groups/:id/members/:userId", deleteChild("userId", deps.Groups.RemoveMember))

	adm.GET("/admin/limiter", s.limiterStats)
	if deps.Quotas != nil {
		adm.GET("/admin/quotas", s.listQuotas)
		adm.PUT("/admin/quotas", s.idempotent, withBody(s, http.StatusOK, deps.Quotas.Put))
		adm.DELETE("/admin/quotas/:subject/:id", s.deleteQuota)
	}

	adm.GET("/admin/intents", s.listIntents)
	adm.POST("/admin/intents", s.idempotent, withBody(s, http.StatusCreated, anyCaller(deps.Intents.Create)))
	adm.PUT("/admin/intents/:id", s.idempotent, withIDBody(s, http.StatusOK, anyCallerID(deps.Intents.Update)))
	adm.DELETE("/admin/intents/:id", s.deleteIntent)
	adm.GET("/admin/term-mappings", s.listTermMappings)
	adm.POST("/admin/term-mappings", s.idempotent, withBody(s, http.StatusCreated, anyCaller(deps.Terms.Create)))
	adm.PUT("/admin/term-mappings/:id", s.idempotent, withIDBody(s, http.StatusOK, anyCallerID(deps.Terms.Update)))
	adm.DELETE("/admin/term-mappings/:id", deleteByID(anyCallerDelete(deps.Terms.Delete)))

	adm.GET("/admin/audit", s.listAudit)
	adm.GET("/admin/feedback", s.listFeedback)
	adm.GET("/admin/feedback/export", s.exportFeedback)
	adm.PUT("/admin/feedback/:id/chunks", s.idempotent, withIDBody(s, http.StatusOK, deps.Chat.Judge))
}
