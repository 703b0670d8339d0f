package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestUnavailableBodiesAreStable cuts an instance's Redis (through a proxy)
// and calls routes that then fail with 503: the limiter's state, a stop,
// and an OpenAI-compatible chat. Every body carries its code and a stable
// message, never the failure's own text (the dependency's address, the
// driver's error).
func TestUnavailableBodiesAreStable(t *testing.T) {
	cfg := testConfig(t)
	u, err := url.Parse(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	cfg.RedisURL = u.String()
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	c := in.client(t, admin)

	proxy.Down()
	_, port, _ := strings.Cut(proxy.Addr(), ":")
	for _, call := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/admin/limiter", nil},
		{"POST", "/api/v1/chat/tasks/123456789/stop", nil},
		{"POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": []map[string]string{{"role": "user", "content": "hello"}}}},
	} {
		r := c.do(call.method, call.path, call.body)
		if r.Status < 500 {
			t.Fatalf("%s %s with Redis down: %d %s", call.method, call.path, r.Status, r.Body)
		}
		code := r.errorCode(t)
		body := string(r.Body)
		if code == "" || code == "internal" && r.Status == http.StatusServiceUnavailable {
			t.Errorf("%s %s: %d without its code: %s", call.method, call.path, r.Status, body)
		}
		for _, leak := range []string{port, "127.0.0.1", "dial", "tcp", "redis", "connection refused", "EOF"} {
			if strings.Contains(strings.ToLower(body), strings.ToLower(leak)) {
				t.Errorf("%s %s: the body shows %q: %s", call.method, call.path, leak, body)
			}
		}
	}
}
