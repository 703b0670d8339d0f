package main

import (
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// access says who may call a route.
type access int

const (
	public access = iota
	anyUser
	adminOnly
	apiKeyOnly // the MCP server: sessions are refused like anonymous callers
	// widgetKeyOnly: the chat widget's routes take a widget key from an
	// allowed origin and nothing else; sessions and anonymous callers are
	// refused (401 or 403). TestWidgetKeyLimits checks the key itself.
	widgetKeyOnly
)

// routeAccess lists every route with who may call it. TestAuthorizationMatrix
// fails when the router has a route missing here, so each new route gets its
// rule checked.
var routeAccess = map[string]access{
	"GET /healthz":                                           public,
	"GET /readyz":                                            public,
	"GET /metrics":                                           public,
	"POST /api/v1/auth/login":                                public,
	"GET /api/v1/auth/providers":                             public,
	"GET /api/v1/auth/oidc/login":                            public,
	"GET /api/v1/auth/oidc/callback":                         public,
	"POST /api/v1/auth/logout":                               anyUser,
	"POST /api/v1/auth/logout-all":                           anyUser,
	"GET /api/v1/me":                                         anyUser,
	"GET /api/v1/limits":                                     anyUser,
	"POST /api/v1/me/password":                               anyUser,
	"GET /api/v1/api-keys":                                   anyUser,
	"POST /api/v1/api-keys":                                  anyUser,
	"DELETE /api/v1/api-keys/:id":                            anyUser,
	"GET /api/v1/users":                                      adminOnly,
	"POST /api/v1/users":                                     adminOnly,
	"PATCH /api/v1/users/:id":                                adminOnly,
	"DELETE /api/v1/users/:id":                               adminOnly,
	"GET /api/v1/knowledge-bases":                            anyUser,
	"GET /api/v1/knowledge-bases/:id":                        anyUser,
	"GET /api/v1/knowledge-bases/:id/documents":              anyUser,
	"GET /api/v1/documents/:id":                              anyUser,
	"GET /api/v1/documents/:id/chunks":                       anyUser,
	"GET /api/v1/conversations":                              anyUser,
	"GET /api/v1/conversations/:id/messages":                 anyUser,
	"PATCH /api/v1/conversations/:id":                        anyUser,
	"DELETE /api/v1/conversations/:id":                       anyUser,
	"POST /api/v1/chat":                                      anyUser,
	"POST /api/v1/chat/tasks/:taskId/stop":                   anyUser,
	"GET /api/v1/chat/tasks/:taskId/events":                  anyUser,
	"POST /api/v1/search":                                    anyUser,
	"POST /api/v1/knowledge-bases":                           adminOnly, // decided in the service: only admins create
	"PATCH /api/v1/knowledge-bases/:id":                      anyUser,   // managers: see TestIsolationMatrix
	"DELETE /api/v1/knowledge-bases/:id":                     anyUser,
	"GET /api/v1/knowledge-bases/:id/members":                anyUser,
	"POST /api/v1/knowledge-bases/:id/members":               anyUser,
	"DELETE /api/v1/knowledge-bases/:id/members/:memberId":   anyUser,
	"POST /api/v1/knowledge-bases/:id/documents":             anyUser, // editors
	"DELETE /api/v1/documents/:id":                           anyUser,
	"DELETE /api/v1/knowledge-bases/:id/documents":           anyUser, // editors, by external id
	"POST /api/v1/knowledge-bases/:id/documents:import":      anyUser, // editors
	"GET /api/v1/knowledge-bases/:id/webhooks":               anyUser, // managers
	"POST /api/v1/knowledge-bases/:id/webhooks":              anyUser,
	"DELETE /api/v1/knowledge-bases/:id/webhooks/:webhookId": anyUser,
	"POST /api/v1/documents/:id/reindex":                     anyUser,
	// Chunk curation: editors of the chunk's knowledge base (TestIsolationMatrix).
	"POST /api/v1/documents/:id/chunks":                   anyUser,
	"POST /api/v1/knowledge-bases/:id/chunks":             anyUser,
	"PATCH /api/v1/chunks/:id":                            anyUser,
	"DELETE /api/v1/chunks/:id":                           anyUser,
	"GET /api/v1/chunks/:id/revisions":                    anyUser,
	"GET /api/v1/documents/:id/deleted-chunks":            anyUser,
	"POST /api/v1/chunks/:id/revisions/:revision/restore": anyUser,
	// Answer feedback: whoever sees the conversation rates; admins read.
	"POST /api/v1/messages/:id/feedback":               anyUser,
	"GET /api/v1/admin/feedback":                       adminOnly,
	"GET /api/v1/admin/feedback/export":                adminOnly,
	"PUT /api/v1/admin/feedback/:id/chunks":            adminOnly,
	"GET /api/v1/groups":                               adminOnly,
	"POST /api/v1/groups":                              adminOnly,
	"PATCH /api/v1/groups/:id":                         adminOnly,
	"DELETE /api/v1/groups/:id":                        adminOnly,
	"GET /api/v1/groups/:id/members":                   adminOnly,
	"POST /api/v1/groups/:id/members":                  adminOnly,
	"DELETE /api/v1/groups/:id/members/:userId":        adminOnly,
	"GET /api/v1/admin/limiter":                        adminOnly,
	"GET /api/v1/admin/intents":                        adminOnly,
	"POST /api/v1/admin/intents":                       adminOnly,
	"PUT /api/v1/admin/intents/:id":                    adminOnly,
	"DELETE /api/v1/admin/intents/:id":                 adminOnly,
	"GET /api/v1/admin/term-mappings":                  adminOnly,
	"POST /api/v1/admin/term-mappings":                 adminOnly,
	"PUT /api/v1/admin/term-mappings/:id":              adminOnly,
	"DELETE /api/v1/admin/term-mappings/:id":           adminOnly,
	"GET /api/v1/admin/audit":                          adminOnly,
	"GET /api/v1/usage":                                anyUser,
	"GET /api/v1/admin/quotas":                         adminOnly,
	"PUT /api/v1/admin/quotas":                         adminOnly,
	"DELETE /api/v1/admin/quotas/:subject/:id":         adminOnly,
	"GET /v1/models":                                   anyUser,
	"POST /v1/chat/completions":                        anyUser,
	"GET /mcp":                                         apiKeyOnly,
	"POST /mcp":                                        apiKeyOnly,
	"DELETE /mcp":                                      apiKeyOnly,
	"GET /":                                            public,
	"GET /widget.js":                                   public,
	"POST /api/v1/widget-keys":                         adminOnly, // decided in the service
	"POST /api/v1/widget/chat":                         widgetKeyOnly,
	"POST /api/v1/widget/chat/tasks/:taskId/stop":      widgetKeyOnly,
	"GET /api/v1/widget/chat/tasks/:taskId/events":     widgetKeyOnly,
	"OPTIONS /api/v1/widget/chat":                      widgetKeyOnly,
	"OPTIONS /api/v1/widget/chat/tasks/:taskId/stop":   widgetKeyOnly,
	"OPTIONS /api/v1/widget/chat/tasks/:taskId/events": widgetKeyOnly,
	"GET /assets/*filepath":                            public,
	"HEAD /assets/*filepath":                           public,
}

func TestAuthorizationMatrix(t *testing.T) {
	cfg := testConfig(t)
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "alice", "alice-password", "user")
	user := in.login(t, "alice", "alice-password")

	for _, r := range in.app.router.Routes() {
		key := r.Method + " " + r.Path
		want, ok := routeAccess[key]
		if !ok {
			t.Errorf("route %s has no access rule in routeAccess", key)
			continue
		}
		path := strings.ReplaceAll(r.Path, ":id", "1")
		path = strings.ReplaceAll(path, ":taskId", "1")
		path = strings.ReplaceAll(path, ":memberId", "1")
		path = strings.ReplaceAll(path, ":userId", "1")
		path = strings.ReplaceAll(path, ":revision", "0")
		for _, who := range []struct {
			name  string
			token string
			level access
		}{{"anonymous", "", public}, {"user", user, anyUser}, {"admin", admin, adminOnly}} {
			t.Run(key+"/"+who.name, func(t *testing.T) {
				if r.Method == "POST" && r.Path == "/api/v1/auth/logout" {
					// Logging out would revoke the shared token; use a fresh one.
					if who.token != "" {
						who.token = in.login(t, map[string]string{"user": "alice", "admin": "admin"}[who.name],
							map[string]string{"user": "alice-password", "admin": "admin-password"}[who.name])
					}
				}
				resp := in.client(t, who.token).do(r.Method, path, "{}")
				switch {
				case want == widgetKeyOnly:
					if resp.Status != http.StatusUnauthorized && resp.Status != http.StatusForbidden {
						t.Fatalf("%s got %d on a widget route, want 401 or 403: %s", who.name, resp.Status, resp.Body)
					}
				case want == public:
					if resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden {
						t.Fatalf("public route answered %d", resp.Status)
					}
				case who.level == public || want == apiKeyOnly:
					if resp.Status != http.StatusUnauthorized {
						t.Fatalf("anonymous got %d, want 401: %s", resp.Status, resp.Body)
					}
				case who.level < want:
					if resp.Status != http.StatusForbidden {
						t.Fatalf("%s got %d, want 403: %s", who.name, resp.Status, resp.Body)
					}
				default:
					if resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden {
						t.Fatalf("%s got %d, want access: %s", who.name, resp.Status, resp.Body)
					}
				}
			})
		}
		if key == "POST /api/v1/auth/logout-all" {
			// That ended every session of both users: sign in again.
			admin = in.login(t, "admin", "admin-password")
			user = in.login(t, "alice", "alice-password")
		}
	}
}

func TestLoginFailures(t *testing.T) {
	cfg := testConfig(t)
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	bobID := in.createUser(t, admin, "bob", "bob-password", "user")
	anon := in.client(t, "")

	tests := []struct {
		name     string
		username string
		password string
		status   int
	}{
		{"wrong password", "bob", "nope-nope", http.StatusUnauthorized},
		{"unknown user", "nobody", "whatever1", http.StatusUnauthorized},
		{"empty password", "bob", "", http.StatusBadRequest},
		{"case-insensitive username", "BOB", "bob-password", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := anon.do("POST", "/api/v1/auth/login", map[string]string{"username": tt.username, "password": tt.password})
			if r.Status != tt.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tt.status)
			}
		})
	}

	t.Run("disabled user", func(t *testing.T) {
		token := in.login(t, "bob", "bob-password")
		r := in.client(t, admin).do("PATCH", "/api/v1/users/"+bobID, map[string]any{"disabled": true})
		if r.Status != http.StatusOK {
			t.Fatalf("disable: %d %s", r.Status, r.Body)
		}
		if r := anon.do("POST", "/api/v1/auth/login", map[string]string{"username": "bob", "password": "bob-password"}); r.Status != http.StatusUnauthorized {
			t.Fatalf("disabled login: %d, want 401", r.Status)
		}
		if r := in.client(t, token).do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("disabled user's existing token: %d, want 401", r.Status)
		}
	})

	t.Run("guessing is limited per username and ip", func(t *testing.T) {
		in.createUser(t, admin, "carol", "carol-password", "user")
		for i := 0; i < 5; i++ {
			anon.do("POST", "/api/v1/auth/login", map[string]string{"username": "carol", "password": "guess-guess"})
		}
		r := anon.do("POST", "/api/v1/auth/login", map[string]string{"username": "carol", "password": "carol-password"})
		if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
			t.Fatalf("after 5 failures: %d (Retry-After %q), want 429 with Retry-After", r.Status, r.Header.Get("Retry-After"))
		}
	})
}

func TestTokens(t *testing.T) {
	// The default TTL: the checks below cannot race the token's expiry on a
	// slow machine (a 2 s token could expire before the cookie check ran).
	cfg := testConfig(t)
	in := start(t, cfg)
	token := in.login(t, "admin", "admin-password")

	parts := strings.Split(token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), `"role":"admin"`, `"role":"user"`, 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]

	tests := []struct {
		name   string
		header string
		status int
	}{
		{"valid", "Bearer " + token, http.StatusOK},
		{"tampered payload", "Bearer " + tampered, http.StatusUnauthorized},
		{"bad signature", "Bearer " + parts[0] + "." + parts[1] + ".AAAA", http.StatusUnauthorized},
		{"garbage", "Bearer not-a-token", http.StatusUnauthorized},
		{"wrong scheme", "Basic " + token, http.StatusUnauthorized},
		{"alg none", "Bearer eyJhbGciOiJub25lIn0." + parts[1] + ".", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := in.client(t, "").do("GET", "/api/v1/me", nil, "Authorization", tt.header)
			if r.Status != tt.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tt.status)
			}
		})
	}

	t.Run("cookie", func(t *testing.T) {
		req, _ := http.NewRequest("GET", in.url+"/api/v1/me", nil)
		req.AddCookie(&http.Cookie{Name: "ragent_session", Value: token})
		if r := roundTrip(t, req); r.Status != http.StatusOK {
			t.Fatalf("cookie auth: %d", r.Status)
		}
	})

	t.Run("login sets an HttpOnly SameSite cookie", func(t *testing.T) {
		r := in.client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "admin", "password": "admin-password"})
		ck := r.Header.Get("Set-Cookie")
		if !strings.Contains(ck, "ragent_session=") || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Lax") {
			t.Fatalf("Set-Cookie = %q", ck)
		}
	})

	t.Run("expired", func(t *testing.T) {
		// Another instance on the same database (same signing secret)
		// issues one-second tokens; the first instance must refuse one once
		// it has expired.
		short := cfg
		short.TokenTTL = time.Second
		brief := start(t, short).login(t, "admin", "admin-password")
		testenv.Eventually(t, 15*time.Second, "the one-second token to expire", func() bool {
			r := in.client(t, brief).do("GET", "/api/v1/me", nil)
			if r.Status != http.StatusOK && r.Status != http.StatusUnauthorized {
				t.Fatalf("one-second token: %d %s, want 200 then 401", r.Status, r.Body)
			}
			return r.Status == http.StatusUnauthorized
		})
	})
}

// Logout on one instance revokes the token on every instance; concurrent
// first starts create one admin and share one signing secret; instances hand
// out distinct IDs.
func TestInstancesShareAuthAndIDs(t *testing.T) {
	cfg := testConfig(t)
	var (
		wg  sync.WaitGroup
		ins = make([]*instance, 3)
	)
	for i := range ins {
		wg.Go(func() { ins[i] = start(t, cfg) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	token := ins[0].login(t, "admin", "admin-password")
	r := ins[1].client(t, token).do("GET", "/api/v1/users", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("token from instance 0 on instance 1: %d %s", r.Status, r.Body)
	}
	var users struct{ Items []struct{ Username string } }
	r.json(t, &users)
	if len(users.Items) != 1 {
		t.Fatalf("%d users after three concurrent first starts, want one admin", len(users.Items))
	}

	workers := map[int64]bool{}
	for _, in := range ins {
		workers[in.app.ids.WorkerID()] = true
	}
	if len(workers) != len(ins) {
		t.Fatalf("worker ids %v are not distinct", workers)
	}
	ids := map[string]bool{}
	for i, in := range ins {
		for j := 0; j < 5; j++ {
			id := in.createUser(t, token, "u"+string(rune('a'+i))+string(rune('a'+j)), "password-123", "user")
			if ids[id] {
				t.Fatalf("duplicate id %s", id)
			}
			ids[id] = true
		}
	}

	if r := ins[0].client(t, token).do("POST", "/api/v1/auth/logout", nil); r.Status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", r.Status, r.Body)
	}
	for i, in := range ins {
		if r := in.client(t, token).do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("revoked token on instance %d: %d, want 401", i, r.Status)
		}
	}
}

// With Redis gone, signed tokens still verify and logout still works: the
// revocation is a Postgres row.
func TestRedisDownTokensStillVerify(t *testing.T) {
	cfg := testConfig(t)
	proxy, url := testenv.RedisProxyURL(t)
	cfg.RedisURL = url
	cfg.WorkerID = 7 // no Redis lease needed
	in := start(t, cfg)
	token := in.login(t, "admin", "admin-password")

	proxy.Down()
	c := in.client(t, token)
	if r := c.do("GET", "/api/v1/me", nil); r.Status != http.StatusOK {
		t.Fatalf("me with Redis down: %d %s", r.Status, r.Body)
	}
	if r := in.client(t, "").do("GET", "/readyz", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with Redis down: %d, want 503", r.Status)
	}
	if r := c.do("POST", "/api/v1/auth/logout", nil); r.Status != http.StatusNoContent {
		t.Fatalf("logout with Redis down: %d %s, want 204", r.Status, r.Body)
	}
	if r := c.do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("logged-out token with Redis down: %d %s, want 401", r.Status, r.Body)
	}
	proxy.Up()
	if r := c.do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("logged-out token after Redis is back: %d %s, want 401", r.Status, r.Body)
	}
}

func TestBadRequests(t *testing.T) {
	cfg := testConfig(t)
	in := start(t, cfg)
	admin := in.adminClient(t)

	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{"malformed json", "POST", "/api/v1/users", `{"username":`, http.StatusBadRequest, "malformed_json"},
		{"trailing data", "POST", "/api/v1/users", `{"username":"x"} {}`, http.StatusBadRequest, "malformed_json"},
		{"unknown field", "POST", "/api/v1/users", `{"usernme":"x"}`, http.StatusBadRequest, "malformed_json"},
		{"empty body", "POST", "/api/v1/users", ``, http.StatusBadRequest, "malformed_json"},
		{"oversized body", "POST", "/api/v1/users", `{"username":"` + strings.Repeat("a", 2<<20) + `"}`, http.StatusRequestEntityTooLarge, "too_large"},
		{"bad id", "PATCH", "/api/v1/users/abc", `{}`, http.StatusBadRequest, "invalid"},
		{"missing user", "PATCH", "/api/v1/users/42", `{}`, http.StatusNotFound, "not_found"},
		{"short password", "POST", "/api/v1/users", `{"username":"dave","password":"short"}`, http.StatusBadRequest, "invalid"},
		{"bad role", "POST", "/api/v1/users", `{"username":"dave","password":"long-enough","role":"root"}`, http.StatusBadRequest, "invalid"},
		{"unknown route", "GET", "/api/v1/nothing", nil, http.StatusNotFound, "not_found"},
		{"wrong method", "PUT", "/api/v1/me", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := admin.do(tt.method, tt.path, tt.body)
			if r.Status != tt.status || r.errorCode(t) != tt.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tt.status, tt.code)
			}
		})
	}

	t.Run("duplicate username", func(t *testing.T) {
		admin.do("POST", "/api/v1/users", map[string]string{"username": "erin", "password": "erin-password"})
		r := admin.do("POST", "/api/v1/users", map[string]string{"username": "ERIN", "password": "erin-password"})
		if r.Status != http.StatusConflict {
			t.Fatalf("duplicate username: %d %s", r.Status, r.Body)
		}
	})
}

// Parallel wrong guesses must not all reach bcrypt: the attempt is reserved
// in Redis before the password is checked, so at most the limit of them are
// answered 401 and the rest 429.
func TestParallelGuessesRespectLimit(t *testing.T) {
	cfg := testConfig(t)
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "dora", "dora-password", "user")

	const guesses = 40
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
	)
	for i := 0; i < guesses; i++ {
		wg.Go(func() {
			r := in.client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "dora", "password": "wrong-guess"})
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	limit := 5 // auth.Config's default MaxFailures
	if statuses[http.StatusUnauthorized] > limit || statuses[http.StatusUnauthorized]+statuses[http.StatusTooManyRequests] != guesses {
		t.Fatalf("statuses %v: want at most %d × 401 (reached bcrypt) and the rest 429", statuses, limit)
	}
}
