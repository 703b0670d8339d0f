// Package mcp is ragent's MCP server: the knowledge bases, search and chat
// as Model Context Protocol tools over the Streamable HTTP transport (the
// official Go SDK), for assistants and IDEs. cmd/ragent mounts its Handler
// at /mcp on the API router.
//
// Callers authenticate with API keys, exactly as on the HTTP API: every
// HTTP request of a session is authenticated again (a revoked key stops at
// its next request), counts against the key's request rate, and each tool
// needs the scopes of the HTTP route it mirrors (api.KeyScopes). The tools
// call the same use cases as the HTTP handlers, so the owner's access and the
// key's knowledge-base limit apply on every path, and `ask` goes through the
// chat pipeline, fair queue and quotas like any chat.
package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	sauth "github.com/ragent-go/ragent/service/auth"
	"github.com/ragent-go/ragent/service/chat"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/retrieve"
)

// Deps are the use cases the tools call, built by cmd/ragent.
type Deps struct {
	Log            *slog.Logger
	APIKeys        *sauth.APIKeys
	KeyRate        *ratelimit.Rate // requests per API key, shared with the HTTP API; nil: no limit
	KnowledgeBases *admin.KnowledgeBases
	Ingest         *ingest.Service
	Search         *retrieve.Searcher
	Chat           *chat.Service
}

// Config bounds the sessions (docs/mcp.md "MCP server").
type Config struct {
	// MaxSessions bounds the open sessions of this instance; a new one past
	// it is refused (503) until one ends. Default 1000.
	MaxSessions int
	// MaxSessionsPerKey bounds one key's open sessions; a new one past it
	// closes the key's oldest (a client that restarts without ending its
	// session does not lock itself out). Default 20.
	MaxSessionsPerKey int
	// SessionIdle closes a session no request has used for this long.
	// Default 30 minutes.
	SessionIdle time.Duration
	// MaxBodyBytes caps a request body. Default 1 MiB.
	MaxBodyBytes int64
	// Version is the server version told to clients.
	Version string
}

// Handler serves /mcp.
type Handler struct {
	deps   Deps
	cfg    Config
	server *mcp.Server
	sdk    http.Handler
	// base ends every tool call at shutdown, with service.ErrShutdown as
	// its cause: the SDK detaches calls from their HTTP requests.
	base     context.Context
	shutdown context.CancelCauseFunc

	// admit serializes new sessions, so the bounds are exact.
	admit sync.Mutex
	// owners maps a session id to the key that opened it, in opening order.
	owners []owner
}

type owner struct {
	session string
	key     service.ID
}

// New returns the handler of /mcp.
func New(deps Deps, cfg Config) *Handler {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	cfg.MaxSessions = cmp.Or(max(cfg.MaxSessions, 0), 1000)
	cfg.MaxSessionsPerKey = cmp.Or(max(cfg.MaxSessionsPerKey, 0), 20)
	cfg.SessionIdle = cmp.Or(max(cfg.SessionIdle, 0), 30*time.Minute)
	cfg.MaxBodyBytes = cmp.Or(max(cfg.MaxBodyBytes, 0), 1<<20)
	h := &Handler{deps: deps, cfg: cfg}
	h.base, h.shutdown = context.WithCancelCause(context.Background())
	h.server = mcp.NewServer(&mcp.Implementation{Name: "ragent", Title: "ragent knowledge bases", Version: cmp.Or(cfg.Version, "dev")},
		&mcp.ServerOptions{
			Instructions: instructions,
			Logger:       deps.Log,
			// Tools only: no logging capability (the SDK's default).
			Capabilities: &mcp.ServerCapabilities{},
		})
	h.addTools()
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.server }, &mcp.StreamableHTTPOptions{
		Logger:         deps.Log,
		SessionTimeout: cfg.SessionIdle,
		// The rebinding guard protects servers that trust whoever reaches
		// localhost; every request here needs an API key, and behind a
		// reverse proxy on the same host the Host header is the public one.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        cfg.MaxBodyBytes,
	})
	// The SDK ties a session to the user of its first request (so another
	// key cannot use its id) through a TokenInfo only its own middleware
	// sets; ServeHTTP has authenticated the key by then.
	h.sdk = auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		c, ok := ctx.Value(callerKey{}).(*caller)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: c.p.Key.KeyID.String(), Extra: map[string]any{callerExtra: c}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(streamable)
	return h
}

// instructions tell the client's model what the server is for.
const instructions = `ragent answers questions from an organization's knowledge bases.
Use list_knowledge_bases to see what you can reach, search to find passages (each with its document, section, score and link),
and ask for a written answer with numbered citations [n] to its sources. get_document and get_chunk read what a result points to.`

// Shutdown ends every tool call (a running ask stops with reason shutdown)
// and closes every session, so their streams do not hold the server's
// shutdown.
func (h *Handler) Shutdown() {
	h.shutdown(service.ErrShutdown)
	for s := range h.server.Sessions() {
		_ = s.Close()
	}
}

type callerKey struct{}

const callerExtra = "ragent.caller"

// caller is who sent one HTTP request, and what its tools need of it.
type caller struct {
	p service.Principal
	// base is the scheme and host the request came to, for links.
	base      string
	clientIP  string
	requestID string
}

// ServeHTTP authenticates the key, counts the request against its rate,
// bounds the sessions and hands the request to the SDK.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, err := bearerKey(r)
	var p service.Principal
	if err == nil {
		p, err = h.deps.APIKeys.Authenticate(ctx, key)
	}
	if err == nil {
		err = h.rate(ctx, p)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	c := &caller{p: p, base: baseURL(r), clientIP: service.ClientIP(ctx), requestID: service.RequestID(ctx)}
	r = r.WithContext(context.WithValue(ctx, callerKey{}, c))
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		h.openSession(w, r, p.Key.KeyID)
		return
	}
	h.sdk.ServeHTTP(w, r)
}

// openSession serves a request that may open a session (an initialize)
// within the bounds: past the instance's limit it is refused; past the
// key's, the key's oldest session is closed first.
func (h *Handler) openSession(w http.ResponseWriter, r *http.Request, key service.ID) {
	h.admit.Lock()
	defer h.admit.Unlock()
	live := map[string]*mcp.ServerSession{}
	for s := range h.server.Sessions() {
		live[s.ID()] = s
	}
	h.owners = slices.DeleteFunc(h.owners, func(o owner) bool { return live[o.session] == nil })
	if len(h.owners) >= h.cfg.MaxSessions {
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusServiceUnavailable, service.CodeOf(service.ErrBusy),
			"this server has as many MCP sessions open as it allows; retry later")
		return
	}
	var mine []int
	for i, o := range h.owners {
		if o.key == key {
			mine = append(mine, i)
		}
	}
	if len(mine) >= h.cfg.MaxSessionsPerKey {
		oldest := h.owners[mine[0]]
		h.deps.Log.InfoContext(r.Context(), "mcp session closed: its key opened one more than it may keep", "key", key, "session", oldest.session)
		_ = live[oldest.session].Close()
		h.owners = slices.Delete(h.owners, mine[0], mine[0]+1)
	}
	h.sdk.ServeHTTP(w, r)
	if id := w.Header().Get("Mcp-Session-Id"); id != "" {
		h.owners = append(h.owners, owner{session: id, key: key})
	}
}

func bearerKey(r *http.Request) (string, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	switch {
	case !ok || !strings.EqualFold(scheme, "Bearer") || token == "":
		return "", service.Errorf(service.ErrUnauthenticated, "an API key is required: Authorization: Bearer rk_…")
	case !strings.HasPrefix(token, service.APIKeyPrefix):
		return "", service.Errorf(service.ErrUnauthenticated, "the MCP server takes API keys (rk_…), not session tokens")
	}
	return token, nil
}

// rate counts the request against the key's rate, as the HTTP API does
// (admitted when Redis fails: the fair queue guards the model).
func (h *Handler) rate(ctx context.Context, p service.Principal) error {
	if h.deps.KeyRate == nil {
		return nil
	}
	ok, wait, err := h.deps.KeyRate.Allow(ctx, p.Key.KeyID.String())
	switch {
	case err != nil:
		h.deps.Log.WarnContext(ctx, "api key rate limit unavailable; request admitted", "key", p.Key.KeyID, "err", err)
	case !ok:
		return &service.Error{Kind: service.ErrBusy, RetryAfter: wait, Message: "this API key is over its request rate; slow down"}
	}
	return nil
}

// baseURL is where the request was sent, for links in results. The
// forwarded scheme is believed from anyone: a link is only shown to the
// caller who sent it.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// statuses are the HTTP answers to a request refused before the SDK sees
// it.
var statuses = map[string]int{
	service.CodeOf(service.ErrUnauthenticated): http.StatusUnauthorized,
	service.CodeOf(service.ErrBusy):            http.StatusTooManyRequests,
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := service.CodeOf(err)
	status, ok := statuses[code]
	msg := err.Error()
	var se *service.Error
	if errors.As(err, &se) {
		msg = se.Message
		if se.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(max(se.RetryAfter.Seconds(), 1))))
		}
	}
	if !ok {
		h.deps.Log.ErrorContext(r.Context(), "mcp request failed", "err", err)
		status, code, msg = http.StatusInternalServerError, service.CodeInternal, "internal server error"
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ragent"`)
	}
	writeError(w, status, code, msg)
}

// writeError answers a refused request with a JSON-RPC error (id null: the
// body was not read), which the SDKs' clients surface; data.code is the HTTP
// API's error code.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32001, "message": code + ": " + msg, "data": map[string]string{"code": code}}})
}
