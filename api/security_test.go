package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/web"
)

// The access log's ip is the TCP peer unless the peer is a trusted proxy;
// a forged X-Forwarded-For is ignored by default.
func TestClientIPTrustsOnlyConfiguredProxies(t *testing.T) {
	tests := []struct {
		name    string
		proxies []netip.Prefix
		want    string
	}{
		{"no proxy trusted", nil, "192.0.2.10"},
		{"peer is a trusted proxy", []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, "203.0.113.9"},
		{"another proxy trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "192.0.2.10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			r := NewRouter(Deps{Log: log, TrustedProxies: tt.proxies})
			req := httptest.NewRequest("GET", "/healthz", nil)
			req.RemoteAddr = "192.0.2.10:40000"
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			r.ServeHTTP(httptest.NewRecorder(), req)
			var line struct{ IP string }
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("access log %q: %v", logs.String(), err)
			}
			if line.IP != tt.want {
				t.Fatalf("logged ip %q, want %q", line.IP, tt.want)
			}
		})
	}
}

// The page gets a strict CSP that still admits its import map; every
// response is nosniff and unframeable; /assets/ serves files only.
func TestSecurityHeadersAndAssets(t *testing.T) {
	r := NewRouter(Deps{})
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w
	}

	page := get("/")
	csp := page.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "style-src 'self';", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("page CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Errorf("page CSP allows unsafe code: %q", csp)
	}
	// Every inline script of the page (the import map) is allowed by hash.
	inline := regexp.MustCompile(`(?s)<script(\s[^>]*)?>(.*?)</script>`).FindAllSubmatch(page.Body.Bytes(), -1)
	for _, m := range inline {
		if bytes.Contains(m[1], []byte("src=")) {
			continue
		}
		sum := sha256.Sum256(m[2])
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
			t.Errorf("inline script %.60q is not allowed by the CSP %q", m[2], csp)
		}
	}
	if bytes.Contains(page.Body.Bytes(), []byte(" style=")) || regexp.MustCompile(`\son[a-z]+=`).Match(page.Body.Bytes()) {
		t.Error("the page has inline styles or event handlers the CSP blocks")
	}

	for _, path := range []string{"/", "/healthz", "/api/v1/me", "/assets/app.js"} {
		w := get(path)
		if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(w.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("%s: headers %v", path, w.Header())
		}
	}

	if w := get("/assets/app.js?v=" + web.Version()); w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), "javascript") ||
		!strings.Contains(w.Header().Get("Cache-Control"), "immutable") {
		t.Errorf("app.js: %d %v", w.Code, w.Header())
	}
	for _, path := range []string{"/assets/", "/assets/index.html", "/assets/./", "/assets/missing.js", "/assets/../web.go"} {
		if w := get(path); w.Code != http.StatusNotFound {
			t.Errorf("%s: %d %.80q, want 404", path, w.Code, w.Body.String())
		} else if strings.Contains(w.Body.String(), "{{VERSION}}") || strings.Contains(w.Body.String(), "app.js") {
			t.Errorf("%s shows the template or a listing: %.80q", path, w.Body.String())
		}
	}
}

// /readyz names the failing dependency without its error text, which may
// hold addresses or credentials.
func TestReadyzHidesErrorText(t *testing.T) {
	r := NewRouter(Deps{Pingers: map[string]Pinger{
		"postgres": PingFunc(func(context.Context) error {
			return errors.New("dial tcp 10.1.2.3:5432: password authentication failed for user ragent")
		}),
		"redis": PingFunc(func(context.Context) error { return nil }),
	}})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", w.Code)
	}
	var body struct {
		Down   []string
		Checks map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Down) != 1 || body.Down[0] != "postgres" || body.Checks["postgres"] != "unavailable" || body.Checks["redis"] != "ok" {
		t.Fatalf("body %s", w.Body.String())
	}
	if strings.Contains(w.Body.String(), "10.1.2.3") || strings.Contains(w.Body.String(), "password") {
		t.Fatalf("error text leaked: %s", w.Body.String())
	}
}

func TestMetricsElsewhere(t *testing.T) {
	for _, elsewhere := range []bool{false, true} {
		w := httptest.NewRecorder()
		NewRouter(Deps{MetricsElsewhere: elsewhere}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if want := map[bool]int{false: 200, true: 404}[elsewhere]; w.Code != want {
			t.Errorf("MetricsElsewhere=%v: /metrics %d, want %d", elsewhere, w.Code, want)
		}
	}
}

func TestNormalizeOrigin(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"https://RAG.example.com", "https://rag.example.com", true},
		{"https://rag.example.com:443", "https://rag.example.com", true},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080", true},
		{"http://[::1]:80", "http://[::1]", true},
		{"https://rag.example.com/app", "", false},
		{"ftp://rag.example.com", "", false},
		{"rag.example.com", "", false},
		{"https://user@rag.example.com", "", false},
		{"null", "", false},
	}
	for _, tt := range tests {
		got, ok := NormalizeOrigin(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// uploadRoute names the registered upload route (the CSRF guard and the
// body deadline pick it out by name).
func TestUploadRouteRegistered(t *testing.T) {
	for _, rt := range NewRouter(Deps{}).Routes() {
		if rt.Method == "POST" && rt.Path == uploadRoute {
			return
		}
	}
	t.Fatalf("no POST %s route", uploadRoute)
}
