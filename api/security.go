package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// apiCSP is the Content-Security-Policy of every response except the page:
// JSON, SSE and asset files never need to run or embed anything, and no
// response may be framed (clickjacking).
const apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// securityHeaders sets the headers every response carries. The page at /
// replaces the CSP with its own (see serveWeb).
func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", apiCSP)
	c.Next()
}

// trusted reports whether the peer is one of Deps.TrustedProxies.
func (s *Server) trusted(c *gin.Context) bool {
	ip, err := netip.ParseAddr(c.RemoteIP())
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range s.deps.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// NormalizeOrigin turns "scheme://host[:port]" into the form browsers send
// in the Origin header: lower case, without the scheme's default port. It
// refuses anything with a path, query, user or a scheme other than http(s).
func NormalizeOrigin(s string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", false
	}
	return originOf(u)
}

func originOf(u *url.URL) (string, bool) {
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" || u.Host == "" {
		return "", false
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return scheme + "://" + host, true
}

// servedOrigin is the origin the browser sees this server at: the request's
// Host with the scheme of the connection, or of X-Forwarded-Proto when a
// trusted proxy terminated TLS.
func (s *Server) servedOrigin(c *gin.Context) string {
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	} else if p := strings.ToLower(c.GetHeader("X-Forwarded-Proto")); (p == "https" || p == "http") && s.trusted(c) {
		scheme = p
	}
	o, _ := originOf(&url.URL{Scheme: scheme, Host: c.Request.Host})
	return o
}

// callerOrigin is the origin of the page that sent the request, from Origin
// or else Referer; "" when the browser sent neither (or "null").
func callerOrigin(c *gin.Context) string {
	if o := c.GetHeader("Origin"); o != "" {
		if o == "null" {
			return ""
		}
		n, _ := NormalizeOrigin(o)
		return n
	}
	if ref := c.GetHeader("Referer"); ref != "" {
		if u, err := url.Parse(ref); err == nil {
			n, _ := originOf(u)
			return n
		}
	}
	return ""
}

// csrfGuard protects cookie-authenticated writes. SameSite=Lax does not stop
// a page on another port of the same host (same site, other origin), and a
// cross-origin page can send a form or a text/plain fetch without a CORS
// preflight. So a write that authenticated with the session cookie must come
// from a page of our own origin (Origin, else Referer; neither is refused)
// and carry a content type no cross-origin page can send without a
// preflight we never grant: application/json, or multipart/form-data on the
// upload route (which checks the Origin all the same). Bearer-token clients
// cannot be driven by a foreign page and are not checked.
func (s *Server) csrfGuard(multipartRoute string) gin.HandlerFunc {
	allowed := make(map[string]bool, len(s.deps.AllowedOrigins))
	for _, o := range s.deps.AllowedOrigins {
		allowed[o] = true
	}
	return func(c *gin.Context) {
		if !viaCookie(c) || safeMethod(c.Request.Method) {
			c.Next()
			return
		}
		origin := callerOrigin(c)
		switch {
		case origin == "":
			failCode(c, http.StatusForbidden, "csrf", "a cookie-authenticated write needs an Origin or Referer header")
			return
		case origin != s.servedOrigin(c) && !allowed[origin]:
			failCode(c, http.StatusForbidden, "csrf", "origin "+origin+" may not write with this session (see RAGENT_ALLOWED_ORIGINS)")
			return
		}
		want := "application/json"
		if c.FullPath() == multipartRoute {
			want = "multipart/form-data"
		}
		if mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type")); err != nil || mt != want {
			failCode(c, http.StatusForbidden, "csrf", "a cookie-authenticated "+c.Request.Method+" must be sent as "+want)
			return
		}
		c.Next()
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// bodyDeadline bounds how long reading a request body may take, so a client
// that sends headers and then trickles its body cannot hold a connection
// (and a goroutine) open: once the deadline passes, the body read fails (the
// handler answers 408) and the connection is closed. Uploads get their own,
// longer deadline. The deadline is lifted as soon as the body has been read
// to the end: a read deadline left on the connection would fire during a
// long SSE answer and net/http would cancel the request as if the client had
// gone away. (net/http's own background read happens to clear it at the
// body's end too, but does not document it.)
func bodyDeadline(timeout, uploadTimeout time.Duration, uploadRoute string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Body == nil || c.Request.Body == http.NoBody {
			c.Next()
			return
		}
		d := timeout
		if c.FullPath() == uploadRoute {
			d = uploadTimeout
		}
		rc := http.NewResponseController(c.Writer)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			// Not a real connection (httptest.ResponseRecorder): nothing to bound.
			c.Next()
			return
		}
		c.Request.Body = &deadlineBody{ReadCloser: c.Request.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		c.Next()
	}
}

// deadlineBody lifts the connection's read deadline once the body is read
// to its end.
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	lift func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}

// bodyTimedOut answers 408 when err is the body read deadline passing.
func bodyTimedOut(c *gin.Context, err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.Header("Connection", "close")
	failCode(c, http.StatusRequestTimeout, "body_timeout", "the request body was not received in time")
	return true
}
