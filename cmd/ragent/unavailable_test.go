package main

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestUnavailableBodiesAreStable cuts an instance's Redis (through a proxy)
// and calls routes that then fail with 503: the limiter's state, a stop,
// an upload and an OpenAI-compatible chat (streamed or not). Every body
// carries its code and a stable message, never the failure's own text (the
// dependency's address, the driver's error), and every 503 a Retry-After.
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
	kb := c.createKB("outage-uploads")

	proxy.Down()
	_, port, _ := strings.Cut(proxy.Addr(), ":")
	ask := func(stream bool) map[string]any {
		return map[string]any{"model": "ragent", "stream": stream, "messages": []map[string]string{{"role": "user", "content": "hello"}}}
	}
	for _, call := range []struct {
		name string
		send func() response
	}{
		{"limiter", func() response { return c.do("GET", "/api/v1/admin/limiter", nil) }},
		{"stop", func() response { return c.do("POST", "/api/v1/chat/tasks/123456789/stop", nil) }},
		{"upload", func() response { return c.upload(kb, "outage.txt", []byte("Written while Redis was away.")) }},
		{"completion", func() response { return c.do("POST", "/v1/chat/completions", ask(false)) }},
		{"streamed completion", func() response { return c.do("POST", "/v1/chat/completions", ask(true)) }},
	} {
		r := call.send()
		if r.Status < 500 {
			t.Fatalf("%s with Redis down: %d %s", call.name, r.Status, r.Body)
		}
		code := r.errorCode(t)
		body := string(r.Body)
		if code == "" || code == "internal" && r.Status == http.StatusServiceUnavailable {
			t.Errorf("%s: %d without its code: %s", call.name, r.Status, body)
		}
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); r.Status == http.StatusServiceUnavailable && (err != nil || s < 1) {
			t.Errorf("%s: 503 with Retry-After %q, want whole seconds", call.name, r.Header.Get("Retry-After"))
		}
		for _, leak := range []string{port, "127.0.0.1", "dial", "tcp", "redis", "connection refused", "EOF"} {
			if strings.Contains(strings.ToLower(body), strings.ToLower(leak)) {
				t.Errorf("%s: the body shows %q: %s", call.name, leak, body)
			}
		}
	}
}
