package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragent-go/ragent/service"
)

// Keys of values kept in the gin context.
const (
	ctxLogger    = "ragent.logger"
	ctxPrincipal = "ragent.principal"
	ctxViaCookie = "ragent.via_cookie" // authenticated by the session cookie, not a bearer token
)

// SessionCookie carries the token for browsers.
const SessionCookie = "ragent_session"

// requestID takes X-Request-ID from the client when it is sane, or makes
// one, and puts it in the response, the request context and the logger;
// the request context also gets the client IP.
func requestID(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-ID")
		if id == "" || len(id) > 64 || strings.ContainsAny(id, " \t\r\n") {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Header("X-Request-ID", id)
		// The client IP as the trusted-proxy setting allows (gin's ClientIP)
		// goes along for the audit log.
		ctx := service.WithClientIP(service.WithRequestID(c.Request.Context(), id), c.ClientIP())
		c.Request = c.Request.WithContext(ctx)
		// The logger adds the id from the request context to every line.
		c.Set(ctxLogger, log)
		c.Next()
	}
}

// routeLabel names the matched route pattern (never the raw path, so
// metrics and logs stay low-cardinality).
func routeLabel(c *gin.Context) string {
	if route := c.FullPath(); route != "" {
		return route
	}
	return "unmatched"
}

// accessLog logs one line per request.
func accessLog() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := routeLabel(c)
		level := slog.LevelInfo
		if c.Writer.Status() >= 500 {
			level = slog.LevelWarn
		}
		if route == "/healthz" || route == "/readyz" || route == "/metrics" {
			level = slog.LevelDebug
		}
		logger(c).Log(c.Request.Context(), level, "http request",
			"method", c.Request.Method, "route", route, "status", c.Writer.Status(),
			"duration_ms", time.Since(start).Milliseconds(), "bytes", c.Writer.Size(), "ip", c.ClientIP())
	}
}

// recovery turns a panic into a logged 500 JSON error.
func recovery() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				logger(c).ErrorContext(c.Request.Context(), "panic", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				if !c.Writer.Written() {
					failCode(c, http.StatusInternalServerError, "internal", "internal server error")
				} else {
					c.Abort()
				}
			}
		}()
		c.Next()
	}
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragent_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ragent_http_request_duration_seconds", Help: "HTTP request latency by route (SSE streams included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"route", "method"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

func (m *httpMetrics) handler() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := routeLabel(c)
		m.requests.WithLabelValues(route, c.Request.Method, strconv.Itoa(c.Writer.Status())).Inc()
		m.duration.WithLabelValues(route, c.Request.Method).Observe(time.Since(start).Seconds())
	}
}

// authenticate requires a valid token from the Authorization header or the
// session cookie and stores the principal. A bearer token starting "rk_" is
// an API key (header only: a key in a cookie or the query string is never
// read, so the CSRF guard, which is about cookies, does not concern keys).
func (s *Server) authenticate(c *gin.Context) {
	token, cookie := "", false
	if h := c.GetHeader("Authorization"); h != "" {
		scheme, rest, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(rest) == "" {
			fail(c, service.Errorf(service.ErrUnauthenticated, "authorization header must be 'Bearer <token>'"))
			return
		}
		token = strings.TrimSpace(rest)
	} else if ck, err := c.Cookie(SessionCookie); err == nil {
		token, cookie = ck, true
	}
	if token == "" {
		fail(c, service.Errorf(service.ErrUnauthenticated, "login required"))
		return
	}
	var p service.Principal
	var err error
	switch {
	case strings.HasPrefix(token, service.APIKeyPrefix) && cookie:
		err = service.Errorf(service.ErrUnauthenticated, "API keys are accepted only in the Authorization header")
	case strings.HasPrefix(token, service.APIKeyPrefix):
		p, err = s.authenticateKey(c, token)
	default:
		p, err = s.deps.Auth.Authenticate(c.Request.Context(), token)
		if err == nil {
			err = s.sessionRate(c, p)
		}
	}
	if err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxPrincipal, p)
	c.Set(ctxViaCookie, cookie)
	// The use cases' audit events name the caller from the request context.
	c.Request = c.Request.WithContext(service.WithPrincipal(c.Request.Context(), p))
	c.Next()
}

// sessionRate counts a session request against its user's rate (all their
// sessions together, so signing in again is no way around it). Like the API
// keys' rate it admits the request when Redis fails, warning at most once a
// minute: every request would otherwise log a line.
func (s *Server) sessionRate(c *gin.Context, p service.Principal) error {
	if s.deps.SessionRate == nil {
		return nil
	}
	ok, wait, err := s.deps.SessionRate.Allow(c.Request.Context(), p.UserID.String())
	switch {
	case err != nil:
		if s.sessionRateWarn.Allow() {
			logger(c).WarnContext(c.Request.Context(), "session rate limit unavailable; requests admitted", "err", err)
		}
	case !ok:
		return &service.Error{Kind: service.ErrBusy, RetryAfter: wait, Message: "too many requests from this account; slow down"}
	}
	return nil
}

// viaCookie reports whether the caller authenticated with the session
// cookie, which a browser attaches to requests other pages make.
func viaCookie(c *gin.Context) bool {
	return c.GetBool(ctxViaCookie)
}

// requireAdmin lets only admins through. A refused attempt at an audited
// change is recorded here, since its use case never runs (adminAudited).
func (s *Server) requireAdmin(c *gin.Context) {
	if !principal(c).IsAdmin() {
		err := service.Errorf(service.ErrForbidden, "admin role required")
		s.auditRefusal(c, err)
		fail(c, err)
		return
	}
	c.Next()
}

// principal returns the authenticated caller; authenticate must have run.
func principal(c *gin.Context) service.Principal {
	p, _ := c.Get(ctxPrincipal)
	pp, _ := p.(service.Principal)
	return pp
}

// bindJSON decodes the body into dst, mapping every failure to a clear 4xx.
// Bodies are capped at Deps.MaxBodyBytes; unknown fields are refused.
func (s *Server) bindJSON(c *gin.Context, dst any) bool {
	return s.bindBody(c, dst, true)
}

// bindBody is bindJSON with unknown fields refused only when strict.
func (s *Server) bindBody(c *gin.Context, dst any, strict bool) bool {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		fail(c, service.Errorf(service.ErrUnsupported, "content type must be application/json"))
		return false
	}
	if c.Request.ContentLength > s.deps.MaxBodyBytes {
		fail(c, service.TooLarge("request body", s.deps.MaxBodyBytes))
		return false
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, s.deps.MaxBodyBytes)
	if err := decodeJSON(body, dst, strict); err != nil {
		if bodyTimedOut(c, err) {
			return false
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(c, service.TooLarge("request body", tooBig.Limit))
			return false
		}
		failCode(c, http.StatusBadRequest, "malformed_json", "malformed JSON: "+err.Error())
		return false
	}
	if err := storableStrings(dst); err != nil {
		fail(c, err) // well-formed JSON with a value that cannot be stored
		return false
	}
	return true
}

// pathID parses the :name path parameter as an ID.
func pathID(c *gin.Context, name string) (service.ID, bool) {
	id, err := service.ParseID(c.Param(name))
	if err != nil {
		fail(c, err)
		return 0, false
	}
	return id, true
}

// queryID reads the optional id parameter ?name= into *dst, which stays as
// it is when the parameter is absent. An unparsable one is answered with a
// 400 saying "name must be what", and queryID returns false.
func queryID(c *gin.Context, name, what string, dst *service.ID) bool {
	v := c.Query(name)
	if v == "" {
		return true
	}
	id, err := service.ParseID(v)
	if err != nil {
		fail(c, service.Errorf(service.ErrInvalid, "%s must be %s", name, what))
		return false
	}
	*dst = id
	return true
}

// everyInterval allows one event per interval (a warning that would
// otherwise repeat on every request).
type everyInterval struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

func (e *everyInterval) Allow() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now := time.Now(); e.last.IsZero() || now.Sub(e.last) >= e.every {
		e.last = now
		return true
	}
	return false
}
