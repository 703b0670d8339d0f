package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Tests of the HTTP edge: which client IP is believed, CSRF on cookie
// sessions, slow bodies, the metrics listener.

// failLogins sends n wrong passwords for username, each from a different
// forged X-Forwarded-For.
func failLogins(t *testing.T, in *instance, username string, n int, forwardedFor func(i int) string) {
	t.Helper()
	anon := in.client(t, "")
	for i := 0; i < n; i++ {
		r := anon.do("POST", "/api/v1/auth/login", map[string]string{"username": username, "password": "guess-guess"},
			"X-Forwarded-For", forwardedFor(i))
		if r.Status != http.StatusUnauthorized && r.Status != http.StatusTooManyRequests {
			t.Fatalf("failed login %d: %d %s", i, r.Status, r.Body)
		}
	}
}

// A forged X-Forwarded-For does not give a guesser a fresh IP per try: by
// default no proxy is trusted and the TCP peer is the client.
func TestForwardedForNotTrustedByDefault(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "carol", "carol-password", "user")

	failLogins(t, in, "carol", 12, func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) })
	r := in.client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "carol", "password": "carol-password"},
		"X-Forwarded-For", "203.0.113.200")
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("after 12 failures from forged addresses: %d %s, want 429", r.Status, r.Body)
	}
}

// Behind a trusted proxy (RAGENT_TRUSTED_PROXIES) X-Forwarded-For names the
// client: the guessing limit holds per forwarded address.
func TestTrustedProxyForwardedFor(t *testing.T) {
	cfg := testConfig(t)
	cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "carol", "carol-password", "user")
	anon := in.client(t, "")

	failLogins(t, in, "carol", 5, func(int) string { return "198.51.100.7" })
	good := map[string]string{"username": "carol", "password": "carol-password"}
	if r := anon.do("POST", "/api/v1/auth/login", good, "X-Forwarded-For", "198.51.100.8"); r.Status != http.StatusOK {
		t.Fatalf("login from another forwarded address: %d %s, want 200", r.Status, r.Body)
	}
	if r := anon.do("POST", "/api/v1/auth/login", good, "X-Forwarded-For", "198.51.100.7"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("login from the guessing address: %d %s, want 429", r.Status, r.Body)
	}
}

// cookieClient calls the API as a browser would: the session cookie and the
// headers the test names, no Authorization.
type cookieClient struct {
	t      *testing.T
	base   string
	cookie string
}

func (c cookieClient) do(method, path, contentType string, body []byte, headers ...string) response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.AddCookie(&http.Cookie{Name: "ragent_session", Value: c.cookie})
	setHeaders(req, headers)
	return roundTrip(c.t, req)
}

// A page on another origin of the same site (another port of the host)
// cannot drive a cookie session: writes need the served Origin (or Referer)
// and a JSON (upload: multipart) content type. Bearer clients need neither.
func TestCSRFCookieWrites(t *testing.T) {
	in := start(t, testConfig(t))
	token := in.login(t, "admin", "admin-password")
	bearer := in.client(t, token)
	kb := bearer.createKB("csrf")
	self := in.url // http://127.0.0.1:PORT
	port, _ := strconv.Atoi(strings.TrimPrefix(self, "http://127.0.0.1:"))
	other := fmt.Sprintf("http://127.0.0.1:%d", port+1) // same site, another origin
	browser := cookieClient{t: t, base: in.url, cookie: token}

	user := []byte(`{"username":"mallory","password":"mallory-password","role":"admin"}`)
	term := []byte(`{"sourceTerm":"evil","targetTerm":"eviler"}`)
	mpType, mpBody := uploadForm("notes.md", []byte("# Notes\n\nplanted by another origin\n"))
	const form = "application/x-www-form-urlencoded"
	attacks := []struct {
		name, method, path, contentType string
		body                            []byte
		headers                         []string
	}{
		{"user text/plain", "POST", "/api/v1/users", "text/plain", user, []string{"Origin", self}},
		{"user form", "POST", "/api/v1/users", form, []byte("username=mallory"), []string{"Origin", self}},
		{"user other origin", "POST", "/api/v1/users", "application/json", user, []string{"Origin", other}},
		{"user other referer", "POST", "/api/v1/users", "application/json", user, []string{"Referer", other + "/attack.html"}},
		{"user null origin", "POST", "/api/v1/users", "application/json", user, []string{"Origin", "null"}},
		{"user no origin", "POST", "/api/v1/users", "application/json", user, nil},
		{"user no content type", "POST", "/api/v1/users", "", user, []string{"Origin", self}},
		{"term text/plain", "POST", "/api/v1/admin/term-mappings", "text/plain", term, []string{"Origin", self}},
		{"term other origin", "POST", "/api/v1/admin/term-mappings", "application/json", term, []string{"Origin", other}},
		{"term no origin", "POST", "/api/v1/admin/term-mappings", "application/json", term, nil},
		{"upload other origin", "POST", "/api/v1/knowledge-bases/" + kb + "/documents", mpType, mpBody, []string{"Origin", other}},
		{"upload no origin", "POST", "/api/v1/knowledge-bases/" + kb + "/documents", mpType, mpBody, nil},
		{"upload text/plain", "POST", "/api/v1/knowledge-bases/" + kb + "/documents", "text/plain", mpBody, []string{"Origin", self}},
		{"delete kb other origin", "DELETE", "/api/v1/knowledge-bases/" + kb, "application/json", nil, []string{"Origin", other}},
		{"logout other origin", "POST", "/api/v1/auth/logout", "application/json", []byte("{}"), []string{"Origin", other}},
		{"logout form", "POST", "/api/v1/auth/logout", form, nil, []string{"Origin", self}},
		{"logout no origin", "POST", "/api/v1/auth/logout", "", nil, nil},
	}
	for _, a := range attacks {
		t.Run("refused/"+a.name, func(t *testing.T) {
			b := browser
			b.t = t
			r := b.do(a.method, a.path, a.contentType, a.body, a.headers...)
			if r.Status != http.StatusForbidden || r.errorCode(t) != "csrf" {
				t.Fatalf("got %d %s, want 403 csrf", r.Status, r.Body)
			}
		})
	}

	// Nothing was written, and the session still works.
	var users struct{ Items []struct{ Username string } }
	bearer.do("GET", "/api/v1/users", nil).json(t, &users)
	var terms struct{ Items []any }
	bearer.do("GET", "/api/v1/admin/term-mappings", nil).json(t, &terms)
	var docs struct{ Items []any }
	bearer.do("GET", "/api/v1/knowledge-bases/"+kb+"/documents", nil).json(t, &docs)
	if len(users.Items) != 1 || len(terms.Items) != 0 || len(docs.Items) != 0 {
		t.Fatalf("after the refused writes: users %v, %d term mappings, %d documents", users.Items, len(terms.Items), len(docs.Items))
	}
	if r := bearer.do("GET", "/api/v1/knowledge-bases/"+kb, nil); r.Status != http.StatusOK {
		t.Fatalf("knowledge base after a refused delete: %d", r.Status)
	}
	if r := browser.do("GET", "/api/v1/me", "", nil); r.Status != http.StatusOK {
		t.Fatalf("session after a refused logout: %d %s", r.Status, r.Body)
	}

	// The UI's own requests (Origin = the served origin) work.
	allowed := []struct {
		name, method, path, contentType string
		body                            []byte
		headers                         []string
		status                          int
	}{
		{"create user", "POST", "/api/v1/users", "application/json", user, []string{"Origin", self}, http.StatusCreated},
		{"add term mapping", "POST", "/api/v1/admin/term-mappings", "application/json; charset=utf-8", term, []string{"Referer", self + "/"}, http.StatusCreated},
		{"upload", "POST", "/api/v1/knowledge-bases/" + kb + "/documents", mpType, mpBody, []string{"Origin", self}, http.StatusAccepted},
		{"reads need no origin", "GET", "/api/v1/users", "", nil, nil, http.StatusOK},
	}
	for _, a := range allowed {
		t.Run("allowed/"+a.name, func(t *testing.T) {
			b := browser
			b.t = t
			if r := b.do(a.method, a.path, a.contentType, a.body, a.headers...); r.Status != a.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, a.status)
			}
		})
	}

	t.Run("allowed/bearer without origin", func(t *testing.T) {
		r := in.client(t, token).do("POST", "/api/v1/users", "{\"username\":\"bearer-made\",\"password\":\"bearer-password\"}", "Content-Type", "")
		if r.Status != http.StatusCreated {
			t.Fatalf("bearer create without Origin or content type: %d %s", r.Status, r.Body)
		}
		ct, body := uploadForm("bearer.md", []byte("# Bearer\n\nuploaded by a script\n"))
		if r := in.client(t, token).do("POST", "/api/v1/knowledge-bases/"+kb+"/documents", body, "Content-Type", ct); r.Status != http.StatusAccepted {
			t.Fatalf("bearer upload: %d %s", r.Status, r.Body)
		}
	})

	t.Run("allowed/logout", func(t *testing.T) {
		b := browser
		b.t = t
		if r := b.do("POST", "/api/v1/auth/logout", "application/json", []byte("{}"), "Origin", self); r.Status != http.StatusNoContent {
			t.Fatalf("logout: %d %s", r.Status, r.Body)
		}
		if r := b.do("GET", "/api/v1/me", "", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("after logout: %d", r.Status)
		}
	})
}

// RAGENT_ALLOWED_ORIGINS admits the public origin of a deployment whose
// proxy does not pass the browser's Host through.
func TestCSRFAllowedOrigins(t *testing.T) {
	cfg := testConfig(t)
	cfg.AllowedOrigins = []string{"https://rag.example.com"}
	in := start(t, cfg)
	token := in.login(t, "admin", "admin-password")
	browser := cookieClient{t: t, base: in.url, cookie: token}
	term := []byte(`{"sourceTerm":"a","targetTerm":"b"}`)
	if r := browser.do("POST", "/api/v1/admin/term-mappings", "application/json", term, "Origin", "https://rag.example.com"); r.Status != http.StatusCreated {
		t.Fatalf("allowed origin: %d %s", r.Status, r.Body)
	}
	if r := browser.do("POST", "/api/v1/admin/term-mappings", "application/json", term, "Origin", "http://rag.example.com"); r.Status != http.StatusForbidden {
		t.Fatalf("same host over http: %d %s, want 403", r.Status, r.Body)
	}
}

// trickleCut trickles head (see trickle) and fails unless the server cut the
// request with a 408 or a closed connection, and no sooner than deadline.
func trickleCut(t *testing.T, baseURL, head string, deadline time.Duration) {
	t.Helper()
	line, took := trickle(t, baseURL, head, 20*time.Second)
	if line != "" && !strings.Contains(line, " 408 ") {
		t.Fatalf("answered %q, want 408 or a closed connection", line)
	}
	if took < deadline {
		t.Fatalf("cut after %s, before the %s deadline", took, deadline)
	}
}

// trickle opens a raw connection, sends the request head and then one byte
// of the body (a space) every 100 ms, and reports how the server ended it: the status
// line it answered (if any) and how long that took. It fails the test if the
// server keeps the connection open for limit.
func trickle(t *testing.T, baseURL, head string, limit time.Duration) (statusLine string, took time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	begin := time.Now()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// Whitespace: valid JSON so far, so only the deadline ends it.
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(limit))
	line, err := bufio.NewReader(conn).ReadString('\n')
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept a trickling body open for %s", limit)
	}
	return strings.TrimSpace(line), time.Since(begin)
}

// A client that sends headers and then trickles its body is cut off at the
// body deadline (RAGENT_HTTP_BODY_TIMEOUT; uploads RAGENT_HTTP_UPLOAD_TIMEOUT),
// with 408 or a closed connection; legitimate bodies are unaffected.
func TestSlowBodyIsCut(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPBodyTimeout = time.Second
	cfg.HTTPUploadTimeout = 2 * time.Second
	in := start(t, cfg)
	token := in.login(t, "admin", "admin-password")
	admin := in.client(t, token)
	kb := admin.createKB("slow")

	t.Run("json", func(t *testing.T) {
		head := "POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
		trickleCut(t, in.url, head, cfg.HTTPBodyTimeout)
	})
	t.Run("unauthenticated", func(t *testing.T) {
		head := "POST /api/v1/users HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
		trickle(t, in.url, head, 20*time.Second)
	})
	t.Run("upload", func(t *testing.T) {
		head := "POST /api/v1/knowledge-bases/" + kb + "/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\n"
		trickleCut(t, in.url, head, cfg.HTTPUploadTimeout)
	})
	t.Run("legit upload of a few MB", func(t *testing.T) {
		content := make([]byte, 4<<20) // random bytes: recorded as an unsupported file, nothing to ingest
		rand.Read(content)
		r := admin.upload(kb, "blob.bin", content)
		if r.Status != http.StatusAccepted {
			t.Fatalf("upload: %d %s", r.Status, r.Body)
		}
	})
}

// The body deadline is lifted once the body is read: a chat answer streams
// for longer than it.
func TestChatStreamOutlivesBodyDeadline(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.HTTPBodyTimeout = 300 * time.Millisecond
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	seedKnowledge(t, in, admin)

	begin := time.Now()
	status, events := in.client(t, admin).chatStream(context.Background(), map[string]any{"question": "long answer #slow VPN"}, nil)
	if status != http.StatusOK || len(events) < 2 {
		t.Fatalf("status %d, %d events", status, len(events))
	}
	if took := time.Since(begin); took < 2*cfg.HTTPBodyTimeout {
		t.Fatalf("the stream took %s, not longer than the body deadline: the test proves nothing", took)
	}
	if finish := events[len(events)-2]; finish.Name != "finish" || finish.json(t)["status"] != "completed" {
		t.Fatalf("sequence %q, finish %s", collapse(events), finish.Data)
	}
}
