package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
	"github.com/ragent-go/ragent/web"
)

// The chat widget (docs/widget.md): /widget.js, loaded by any page, talks to
// the three routes under /api/v1/widget with a public widget key (pk_). The
// key is all a visitor has, so these routes are the only ones it opens: the
// session and API-key middleware refuses pk_ tokens everywhere else, and
// these routes take nothing but a widget key.
const (
	widgetVisitorHeader = "X-Widget-Visitor"
	widgetKeyHeader     = "X-Widget-Key"
	// maxWidgetHistory bounds the turns a widget sends back as history.
	maxWidgetHistory = 20
)

// widgetScript serves the widget's script to any page.
func widgetScript(c *gin.Context) {
	b, ok := web.Widget()
	if !ok {
		failCode(c, http.StatusNotFound, "not_found", "no widget in this build")
		return
	}
	c.Header("Cache-Control", "public, max-age=300")
	c.Header("Cross-Origin-Resource-Policy", "cross-origin")
	c.Data(http.StatusOK, "text/javascript; charset=utf-8", b)
}

// widgetKey is the key of a widget request: the query's key (so a
// preflight, which carries no custom header, names it too), else the
// X-Widget-Key header.
func widgetKey(c *gin.Context) string {
	if k := c.Query("key"); k != "" {
		return k
	}
	return c.GetHeader(widgetKeyHeader)
}

// widgetPreflight answers a CORS preflight: only for an origin the key
// lists, else 403 without CORS headers (the browser then sends nothing).
func (s *Server) widgetPreflight(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" {
		fail(c, service.Errorf(service.ErrForbidden, "widget requests must come from a page (the Origin header is required)"))
		return
	}
	if _, err := s.deps.APIKeys.AuthenticateWidget(c.Request.Context(), widgetKey(c), origin, widgetPreflightVisitor); err != nil {
		fail(c, err)
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "GET, POST")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Last-Event-ID, "+widgetVisitorHeader+", "+widgetKeyHeader)
	h.Set("Access-Control-Max-Age", "600")
	h.Add("Vary", "Origin")
	c.Status(http.StatusNoContent)
}

// widgetPreflightVisitor stands in for the visitor a preflight does not
// name; it identifies no one (preflights never chat).
const widgetPreflightVisitor = "preflight-no-visitor"

// widgetAuth authenticates a widget request: the key, the page's Origin
// (required, and listed by the key: a client that sends none or another is
// refused whatever it is) and the visitor id. It sets CORS headers for that
// origin only.
func (s *Server) widgetAuth(c *gin.Context) {
	if s.deps.APIKeys == nil {
		failCode(c, http.StatusNotFound, "not_found", "no such route")
		return
	}
	origin := c.GetHeader("Origin")
	if origin == "" {
		fail(c, service.Errorf(service.ErrForbidden, "widget requests must come from a page (the Origin header is required)"))
		return
	}
	w, err := s.deps.APIKeys.AuthenticateWidget(c.Request.Context(), widgetKey(c), origin, c.GetHeader(widgetVisitorHeader))
	if err != nil {
		s.widgetRefusal(c, origin, err)
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "Retry-After")
	h.Add("Vary", "Origin")
	c.Set(ctxPrincipal, w.Principal)
	c.Set(ctxWidget, w.Settings)
	c.Request = c.Request.WithContext(service.WithPrincipal(c.Request.Context(), w.Principal))
	c.Next()
}

const ctxWidget = "ragent.widget"

// widgetRefusal answers a widget request that failed authentication. A
// refusal proper (401: a bad, expired or revoked key; 403: an origin the
// key does not list) is readable by the refused page, so the widget can
// say why it cannot answer instead of showing a bare network error: it
// carries Access-Control-Allow-Origin for the requesting origin, never
// Access-Control-Allow-Credentials (the page's cookies for ragent are not
// sent, and the answer could not be read if they were), and a body that is
// the error's fixed code and message, nothing from the key or ragent's
// data. Every other failure (429 after too many bad keys, 5xx) and an
// opaque "null" origin get no CORS headers: the page learns nothing. A
// preflight from such an origin still fails (widgetPreflight), so only a
// simple request, the widget's probe, ever reads a refusal
// (docs/security.md, "The widget's refusals").
func (s *Server) widgetRefusal(c *gin.Context, origin string, err error) {
	if status, _ := classify(err); (status == http.StatusUnauthorized || status == http.StatusForbidden) && origin != "null" {
		c.Header("Access-Control-Allow-Origin", origin)
		c.Writer.Header().Add("Vary", "Origin")
	}
	fail(c, err)
}

// widgetRate counts a chat against the visitor's rate, then the origin's:
// a visitor over their own rate spends none of the origin's, and a flood of
// fresh visitor ids from one origin is bounded by the origin's rate.
// Like the API keys' rate it admits the request when Redis fails.
func (s *Server) widgetRate(c *gin.Context) {
	if s.deps.WidgetRate == nil {
		c.Next()
		return
	}
	p := principal(c)
	settings, _ := c.Get(ctxWidget)
	w, _ := settings.(service.WidgetSettings)
	origin, _ := service.NormalizeOrigin(c.GetHeader("Origin"))
	checks := []struct {
		key   string
		limit int
		msg   string
	}{
		{"visitor:" + p.Visitor, w.VisitorRate, "too many questions from this visitor; slow down"},
		{"origin:" + p.Key.KeyID.String() + ":" + origin, w.OriginRate, "too many questions from this site; try again later"},
	}
	for _, ch := range checks {
		ok, wait, err := s.deps.WidgetRate.AllowLimit(c.Request.Context(), ch.key, ch.limit)
		switch {
		case err != nil:
			if s.sessionRateWarn.Allow() {
				logger(c).WarnContext(c.Request.Context(), "widget rate limit unavailable; requests admitted", "err", err)
			}
		case !ok:
			fail(c, &service.Error{Kind: service.ErrBusy, RetryAfter: wait, Message: ch.msg})
			return
		}
	}
	c.Next()
}

// widgetChatRequest is what the widget sends: the question, the turns so
// far (the widget keeps them; nothing is stored for a visitor) and, at
// most, a narrower choice among the key's knowledge bases.
type widgetChatRequest struct {
	Question         string                `json:"question"`
	History          []service.ChatMessage `json:"history"`
	KnowledgeBaseIDs []service.ID          `json:"knowledgeBaseIds"`
}

// widgetChat answers POST /api/v1/widget/chat with the chat event stream.
func (s *Server) widgetChat(c *gin.Context) {
	var in widgetChatRequest
	if !s.bindJSON(c, &in) {
		return
	}
	if len(in.History) > maxWidgetHistory {
		fail(c, service.Errorf(service.ErrInvalid, "at most %d history messages", maxWidgetHistory))
		return
	}
	req := chat.Request{Question: in.Question, History: in.History, KnowledgeBaseIDs: in.KnowledgeBaseIDs, Resumable: true, Ephemeral: true}
	sse := newSSEWriter(c.Writer)
	defer sse.keepAlive(s.deps.PingInterval)()
	if err := s.deps.Chat.Chat(c.Request.Context(), principal(c), req, sse.chatEvent); err != nil {
		fail(c, err)
	}
}

// registerWidget adds the widget's script and routes.
func (s *Server) registerWidget(r *gin.Engine, gate func(...gin.HandlerFunc) []gin.HandlerFunc) {
	r.GET("/widget.js", widgetScript)
	if s.deps.APIKeys == nil {
		return
	}
	w := r.Group("/api/v1/widget")
	for _, path := range []string{"/chat", "/chat/tasks/:taskId/stop", "/chat/tasks/:taskId/events"} {
		w.OPTIONS(path, s.widgetPreflight)
	}
	w.POST("/chat", append([]gin.HandlerFunc{s.widgetAuth, s.widgetRate}, gate(s.widgetChat)...)...)
	w.POST("/chat/tasks/:taskId/stop", s.widgetAuth, s.stopChat)
	w.GET("/chat/tasks/:taskId/events", s.widgetAuth, s.chatEvents)
}
