package main

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/internal/testenv"
)

// apiKeyJSON is a key as the API returns it (key only on creation).
type apiKeyJSON struct {
	ID, Key, Prefix, Name, Username string
	Scopes                          []string
	KnowledgeBaseIDs                []string
	LastUsedAt                      *time.Time
	ExpiresAt                       *time.Time
}

// createKey creates an API key as c and returns it.
func createKey(t *testing.T, c *client, body map[string]any) apiKeyJSON {
	t.Helper()
	r := c.forTest(t).do("POST", "/api/v1/api-keys", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create key %v: %d %s", body, r.Status, r.Body)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q on the response carrying the key", r.Header.Get("Cache-Control"))
	}
	var k apiKeyJSON
	r.json(t, &k)
	return k
}

// listKeys returns the keys c sees.
func listKeys(t *testing.T, c *client) (keys []apiKeyJSON, body string) {
	t.Helper()
	r := c.forTest(t).do("GET", "/api/v1/api-keys", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("list keys: %d %s", r.Status, r.Body)
	}
	var l struct{ Items []apiKeyJSON }
	r.json(t, &l)
	return l.Items, string(r.Body)
}

// textAnywhere returns "table.column" of every column of every table in the
// database whose text form contains s.
func textAnywhere(t *testing.T, dbURL, s string) []string {
	t.Helper()
	ctx := context.Background()
	conn := connectDB(t, dbURL)
	rows, err := conn.Query(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = 'public' ORDER BY table_name, column_name`)
	if err != nil {
		t.Fatal(err)
	}
	var cols [][2]string
	for rows.Next() {
		var c [2]string
		if err := rows.Scan(&c[0], &c[1]); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if rows.Err() != nil || len(cols) < 20 {
		t.Fatalf("columns: %v (%d found)", rows.Err(), len(cols))
	}
	var found []string
	for _, c := range cols {
		var n int
		q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE strpos(%s::text, $1) > 0`,
			pgx.Identifier{c[0]}.Sanitize(), pgx.Identifier{c[1]}.Sanitize())
		if err := conn.QueryRow(ctx, q, s).Scan(&n); err != nil {
			t.Fatalf("%s.%s: %v", c[0], c[1], err)
		}
		if n > 0 {
			found = append(found, c[0]+"."+c[1])
		}
	}
	return found
}

// redisAnywhere returns the Redis keys under prefix whose name or value
// (strings, hashes, lists, sets, sorted sets, streams) contains s.
func redisAnywhere(t *testing.T, prefix, s string) []string {
	t.Helper()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, k := range keys {
		var text []string
		switch rdb.Type(ctx, k).Val() {
		case "string":
			text = []string{rdb.Get(ctx, k).Val()}
		case "hash":
			for f, v := range rdb.HGetAll(ctx, k).Val() {
				text = append(text, f, v)
			}
		case "list":
			text = rdb.LRange(ctx, k, 0, -1).Val()
		case "set":
			text = rdb.SMembers(ctx, k).Val()
		case "zset":
			text = rdb.ZRange(ctx, k, 0, -1).Val()
		case "stream":
			for _, m := range rdb.XRange(ctx, k, "-", "+").Val() {
				text = append(text, fmt.Sprint(m.Values))
			}
		}
		if strings.Contains(k, s) || strings.Contains(strings.Join(text, "\n"), s) {
			found = append(found, k)
		}
	}
	return found
}

// TestAPIKeys: a key is shown once and stored only as a hash; it acts as
// its owner narrowed by its scopes; revocation, a demotion and a disable
// take effect on the other instance with its very next request; keys are
// read from the Authorization header only, and CSRF rules do not touch them.
func TestAPIKeys(t *testing.T) {
	cfg := testConfig(t)
	ins := [2]*instance{start(t, cfg), start(t, cfg)}
	adminToken := ins[0].login(t, "admin", "admin-password")
	admin := ins[0].client(t, adminToken)
	bobID := ins[0].createUser(t, adminToken, "bob", "bob-password", "admin")
	bob := ins[0].client(t, ins[0].login(t, "bob", "bob-password"))
	ins[0].createUser(t, adminToken, "eve", "eve-password", "user")
	eve := ins[1].client(t, ins[1].login(t, "eve", "eve-password"))
	private := admin.createKB("private-plans") // no grants: only admins read it
	doc := admin.uploadAccepted(private, "plans.md", []byte("# Plans\n\nThe narwhal project ships in spring.\n")).ID
	admin.waitReady(doc)

	// An Idempotency-Key must not make the server keep the response (it
	// holds the key) for replay.
	r := bob.do("POST", "/api/v1/api-keys", map[string]any{"name": "ingest bot", "scopes": []string{"read", "search"}}, "Idempotency-Key", "create-bot-key")
	if r.Status != http.StatusCreated {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	var k apiKeyJSON
	r.json(t, &k)
	if !regexp.MustCompile(`^rk_[0-9A-Za-z]{43}$`).MatchString(k.Key) || k.Prefix != k.Key[:10] {
		t.Fatalf("key %q prefix %q, want rk_ + 43 base62 characters and its first 10 as prefix", k.Key, k.Prefix)
	}
	key := [2]*client{ins[0].client(t, k.Key), ins[1].client(t, k.Key)}

	t.Run("shown once, never stored", func(t *testing.T) {
		keys, body := listKeys(t, bob)
		if len(keys) != 1 || keys[0].Prefix != k.Prefix || keys[0].Key != "" || strings.Contains(body, k.Key[10:]) {
			t.Fatalf("list shows %s", body)
		}
		if r := key[1].do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
			t.Fatalf("key use: %d %s", r.Status, r.Body) // so last_used_at is written too
		}
		for _, s := range []string{k.Key, k.Key[len("rk_"):], k.Key[12:30]} {
			if cols := textAnywhere(t, cfg.DatabaseURL, s); len(cols) > 0 {
				t.Fatalf("the key (or a part of it) is stored in %v", cols)
			}
		}
		if found := redisAnywhere(t, cfg.RedisPrefix, k.Key[len("rk_"):]); len(found) > 0 {
			t.Fatalf("the key is stored in Redis under %v", found)
		}
		if keys, _ := listKeys(t, bob); keys[0].LastUsedAt == nil {
			t.Error("last used time not recorded")
		}
	})

	t.Run("scopes", func(t *testing.T) {
		want := []struct {
			method, path string
			body         any
			status       int
		}{
			{"GET", "/api/v1/knowledge-bases/" + private, nil, http.StatusOK},             // read, as its admin owner
			{"POST", "/api/v1/search", map[string]any{"query": "narwhal"}, http.StatusOK}, // search
			{"POST", "/api/v1/chat", map[string]any{"question": "narwhal?"}, http.StatusForbidden},
			{"POST", "/api/v1/documents/" + doc + "/reindex", nil, http.StatusForbidden}, // no ingest
			{"GET", "/api/v1/me", nil, http.StatusForbidden},
			{"POST", "/api/v1/api-keys", map[string]any{"name": "child", "scopes": []string{"read"}}, http.StatusForbidden},
			{"GET", "/api/v1/api-keys", nil, http.StatusForbidden},
			{"GET", "/api/v1/users", nil, http.StatusForbidden}, // its owner is an admin; the key is not
			{"POST", "/api/v1/auth/logout", nil, http.StatusForbidden},
		}
		for _, w := range want {
			if r := key[1].do(w.method, w.path, w.body); r.Status != w.status {
				t.Errorf("%s %s: %d %s, want %d", w.method, w.path, r.Status, r.Body, w.status)
			}
		}
	})

	t.Run("owner demoted narrows the key at once", func(t *testing.T) {
		if r := admin.do("PATCH", "/api/v1/users/"+bobID, map[string]any{"role": "user"}); r.Status != http.StatusOK {
			t.Fatalf("demote: %d %s", r.Status, r.Body)
		}
		if r := key[1].do("GET", "/api/v1/knowledge-bases/"+private, nil); r.Status != http.StatusNotFound {
			t.Fatalf("demoted owner's key reads the private knowledge base: %d %s", r.Status, r.Body)
		}
		if r := key[1].do("POST", "/api/v1/search", map[string]any{"query": "narwhal"}); r.Status != http.StatusOK || strings.Contains(string(r.Body), doc) {
			t.Fatalf("demoted owner's key searches the private document: %d %s", r.Status, r.Body)
		}
	})

	t.Run("owner disabled refuses the key at once", func(t *testing.T) {
		if r := admin.do("PATCH", "/api/v1/users/"+bobID, map[string]any{"disabled": true}); r.Status != http.StatusOK {
			t.Fatalf("disable: %d %s", r.Status, r.Body)
		}
		for i, c := range key {
			if r := c.do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusUnauthorized {
				t.Fatalf("instance %d: disabled owner's key: %d %s", i, r.Status, r.Body)
			}
		}
		if r := admin.do("PATCH", "/api/v1/users/"+bobID, map[string]any{"disabled": false}); r.Status != http.StatusOK {
			t.Fatalf("enable: %d %s", r.Status, r.Body)
		}
		// Keys are not sessions: enabled again, the owner's keys work again
		// (their sessions, ended by the disable, do not).
		if r := key[1].do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
			t.Fatalf("enabled owner's key: %d %s", r.Status, r.Body)
		}
		bob = ins[0].client(t, ins[0].login(t, "bob", "bob-password"))
	})

	t.Run("only the owner and admins see and revoke a key", func(t *testing.T) {
		if keys, _ := listKeys(t, eve); len(keys) != 0 {
			t.Fatalf("eve sees %v", keys)
		}
		if r := eve.do("DELETE", "/api/v1/api-keys/"+k.ID, nil); r.Status != http.StatusNotFound {
			t.Fatalf("eve revokes bob's key: %d %s", r.Status, r.Body)
		}
		keys, _ := listKeys(t, admin)
		if len(keys) != 1 || keys[0].ID != k.ID || keys[0].Username != "bob" {
			t.Fatalf("admin's list %v, want bob's key with its owner", keys)
		}
	})

	t.Run("revoked on one instance is refused on the other at once", func(t *testing.T) {
		if r := admin.do("DELETE", "/api/v1/api-keys/"+k.ID, nil); r.Status != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		// Postgres is read on every request: the very next one is refused,
		// well within the 1 s the contract allows.
		begin := time.Now()
		if r := key[1].do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("revoked key on the other instance: %d %s", r.Status, r.Body)
		}
		if d := time.Since(begin); d > time.Second {
			t.Fatalf("refusal took %v", d)
		}
		if r := bob.do("DELETE", "/api/v1/api-keys/"+k.ID, nil); r.Status != http.StatusNotFound {
			t.Fatalf("revoking twice: %d %s", r.Status, r.Body)
		}
		if keys, _ := listKeys(t, bob); len(keys) != 0 {
			t.Fatalf("revoked key still listed: %v", keys)
		}
	})

	t.Run("header only; CSRF does not apply", func(t *testing.T) {
		k := createKey(t, eve, map[string]any{"name": "bot", "scopes": []string{"search"}})
		browser := cookieClient{t: t, base: ins[0].url, cookie: k.Key}
		if r := browser.do("POST", "/api/v1/search", "application/json", []byte(`{"query":"x"}`), "Origin", ins[0].url); r.Status != http.StatusUnauthorized {
			t.Fatalf("key in the session cookie: %d %s", r.Status, r.Body)
		}
		anon := ins[0].client(t, "")
		for _, q := range []string{"key", "api_key", "access_token", "token"} {
			if r := anon.do("POST", "/api/v1/search?"+q+"="+k.Key, map[string]any{"query": "x"}); r.Status != http.StatusUnauthorized {
				t.Fatalf("key in ?%s=: %d %s", q, r.Status, r.Body)
			}
		}
		// No Origin, a foreign Origin: a bearer key is not a browser's
		// ambient credential, so the CSRF guard has nothing to guard.
		c := ins[0].client(t, k.Key)
		for _, origin := range []string{"", "https://evil.example"} {
			if r := c.do("POST", "/api/v1/search", map[string]any{"query": "x"}, "Origin", origin); r.Status != http.StatusOK {
				t.Fatalf("key with Origin %q: %d %s", origin, r.Status, r.Body)
			}
		}
	})

	t.Run("invalid input", func(t *testing.T) {
		for _, body := range []map[string]any{
			{"name": "", "scopes": []string{"read"}},
			{"name": "x", "scopes": []string{}},
			{"name": "x", "scopes": []string{"admin"}},
			{"name": "x", "scopes": []string{"read"}, "knowledgeBaseIds": []string{}},
			{"name": "x", "scopes": []string{"read"}, "expiresAt": time.Now().Add(-time.Hour)},
		} {
			if r := eve.do("POST", "/api/v1/api-keys", body); r.Status != http.StatusBadRequest {
				t.Errorf("%v: %d %s, want 400", body, r.Status, r.Body)
			}
		}
		if r := eve.do("POST", "/api/v1/api-keys", map[string]any{"name": "x", "scopes": []string{"read"}, "knowledgeBaseIds": []string{private}}); r.Status != http.StatusNotFound {
			t.Errorf("naming an unreadable knowledge base: %d %s, want 404", r.Status, r.Body)
		}
	})
}

// TestAPIKeyKnowledgeBases: a key limited to knowledge base A searches and
// chats over A only when it names none, and naming B is 404 although its
// owner reads B.
func TestAPIKeyKnowledgeBases(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.adminClient(t)
	a, b := admin.createKB("kb-a"), admin.createKB("kb-b")
	admin.waitReady(admin.uploadAccepted(a, "a.md", []byte("# A\n\nThe walrus lives in knowledge base A.\n")).ID)
	docB := admin.uploadAccepted(b, "b.md", []byte("# B\n\nThe walrus also lives in knowledge base B.\n")).ID
	admin.waitReady(docB)
	k := createKey(t, admin, map[string]any{"name": "a only", "scopes": []string{"search", "chat", "read"}, "knowledgeBaseIds": []string{a}})
	c := in.client(t, k.Key)

	r := c.do("POST", "/api/v1/search", map[string]any{"query": "walrus", "topK": 50})
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "a.md") || strings.Contains(string(r.Body), "b.md") {
		t.Fatalf("search without ids: %d %s, want A's document only", r.Status, r.Body)
	}
	for path, body := range map[string]map[string]any{
		"/api/v1/search": {"query": "walrus", "knowledgeBaseIds": []string{b}},
		"/api/v1/chat":   {"question": "walrus?", "knowledgeBaseIds": []string{b}},
	} {
		if r := c.do("POST", path, body); r.Status != http.StatusNotFound {
			t.Fatalf("%s naming B: %d %s, want 404", path, r.Status, r.Body)
		}
	}
	names, _ := chatSources(t, c, map[string]any{"question": "Where does the walrus live?"})
	if slices.Contains(names, "b.md") || !slices.Contains(names, "a.md") {
		t.Fatalf("chat sources %v, want A's only", names)
	}
	var kbs struct{ Items []struct{ ID string } }
	c.do("GET", "/api/v1/knowledge-bases", nil).json(t, &kbs)
	if len(kbs.Items) != 1 || kbs.Items[0].ID != a {
		t.Fatalf("key lists %v, want A only", kbs.Items)
	}
	if r := c.do("GET", "/api/v1/documents/"+docB, nil); r.Status != http.StatusNotFound {
		t.Fatalf("B's document: %d %s", r.Status, r.Body)
	}

	// Admins read anyone's conversation; an admin's key does not: the
	// answers may quote knowledge bases outside its list.
	adminToken := in.login(t, "admin", "admin-password")
	in.createUser(t, adminToken, "dan", "dan-password", "user")
	dan := in.client(t, in.login(t, "dan", "dan-password"))
	_, events := dan.chatStream(context.Background(), map[string]any{"question": "hello there"}, nil)
	conv := events[0].json(t)["conversationId"].(string)
	if r := admin.do("GET", "/api/v1/conversations/"+conv+"/messages", nil); r.Status != http.StatusOK {
		t.Fatalf("admin reads dan's conversation: %d %s", r.Status, r.Body)
	}
	if r := c.do("GET", "/api/v1/conversations/"+conv+"/messages", nil); r.Status != http.StatusNotFound {
		t.Fatalf("admin's key reads dan's conversation: %d %s, want 404", r.Status, r.Body)
	}
}

// TestAPIKeyLimits: a key has its own request rate (429 with Retry-After,
// on every instance), and its chats count against its owner's chat rate,
// so a bot cannot add to its owner's share.
func TestAPIKeyLimits(t *testing.T) {
	cfg := testConfig(t)
	cfg.APIKeyRatePerMinute, cfg.ChatRatePerMinute = 4, 2
	ins := [2]*instance{start(t, cfg), start(t, cfg)}
	adminToken := ins[0].login(t, "admin", "admin-password")
	ins[0].createUser(t, adminToken, "carol", "carol-password", "user")
	carol := ins[0].client(t, ins[0].login(t, "carol", "carol-password"))

	t.Run("own request rate", func(t *testing.T) {
		k := createKey(t, carol, map[string]any{"name": "fast", "scopes": []string{"read"}})
		for i := range 4 {
			if r := ins[i%2].client(t, k.Key).do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
				t.Fatalf("request %d within the rate: %d %s", i, r.Status, r.Body)
			}
		}
		for i, in := range ins {
			r := in.client(t, k.Key).do("GET", "/api/v1/knowledge-bases", nil)
			if r.Status != http.StatusTooManyRequests || r.errorCode(t) != "busy" {
				t.Fatalf("instance %d over the key's rate: %d %s", i, r.Status, r.Body)
			}
			if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
				t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
			}
		}
		// The owner and the owner's other keys are not limited by it.
		if r := carol.do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
			t.Fatalf("owner: %d", r.Status)
		}
		other := createKey(t, carol, map[string]any{"name": "other", "scopes": []string{"read"}})
		if r := ins[1].client(t, other.Key).do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
			t.Fatalf("another key: %d %s", r.Status, r.Body)
		}
	})

	t.Run("chats count against the owner's chat rate", func(t *testing.T) {
		k := createKey(t, carol, map[string]any{"name": "chatty", "scopes": []string{"chat"}})
		bot := ins[1].client(t, k.Key)
		for i, c := range []*client{carol, bot} {
			status, events := c.chatStream(context.Background(), map[string]any{"question": fmt.Sprintf("question %d", i)}, nil)
			if status != http.StatusOK || collapse(events) != "meta sources message finish done" {
				t.Fatalf("chat %d within the owner's rate: %d %q", i, status, collapse(events))
			}
		}
		for name, c := range map[string]*client{"key": bot, "owner": carol} {
			if r := c.do("POST", "/api/v1/chat", map[string]any{"question": "one too many " + name}); r.Status != http.StatusTooManyRequests {
				t.Fatalf("%s over the owner's chat rate: %d %s", name, r.Status, r.Body)
			}
		}
	})
}

// Every authenticated route outside the scope table refuses a key that
// holds every scope, so a route added without a scope entry is closed to
// keys, never open. Public routes (routeAccess: the login page's, single
// sign-on's) need no credentials, so a key changes nothing there.
func TestAPIKeyRefusedOutsideScopes(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.adminClient(t)
	k := createKey(t, admin, map[string]any{"name": "all", "scopes": []string{"read", "search", "chat", "ingest"}})
	c := in.client(t, k.Key)
	refused := 0
	for _, r := range in.app.router.Routes() {
		key := r.Method + " " + r.Path
		if !strings.HasPrefix(r.Path, "/api/v1/") || key == "POST /api/v1/auth/login" || routeAccess[key] == public || len(api.KeyScopes(key)) > 0 {
			continue
		}
		path := regexp.MustCompile(`:[A-Za-z]+`).ReplaceAllString(r.Path, "1")
		if resp := c.do(r.Method, path, "{}"); resp.Status != http.StatusForbidden || resp.errorCode(t) != "forbidden" {
			t.Errorf("%s with an all-scope key: %d %s, want 403", key, resp.Status, resp.Body)
		}
		refused++
	}
	if refused < 30 {
		t.Fatalf("only %d routes checked", refused)
	}
}

// With Redis gone, keys still authenticate (Postgres is their truth; the
// per-key rate admits and logs), and a revocation made meanwhile is
// refused at once on every instance.
func TestAPIKeysRedisDown(t *testing.T) {
	cfg := testConfig(t)
	proxy, url := testenv.RedisProxyURL(t)
	cfg.RedisURL = url
	cfg.WorkerID = 7 // no Redis lease needed
	ins := [2]*instance{start(t, cfg), start(t, cfg)}
	adminToken := ins[0].login(t, "admin", "admin-password")
	admin := ins[0].client(t, adminToken)
	k := createKey(t, admin, map[string]any{"name": "bot", "scopes": []string{"read"}})

	proxy.Down()
	for i, in := range ins {
		if r := in.client(t, k.Key).do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
			t.Fatalf("instance %d with Redis down: %d %s", i, r.Status, r.Body)
		}
	}
	if r := admin.do("DELETE", "/api/v1/api-keys/"+k.ID, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke with Redis down: %d %s", r.Status, r.Body)
	}
	for i, in := range ins {
		if r := in.client(t, k.Key).do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("instance %d: revoked key with Redis down: %d %s", i, r.Status, r.Body)
		}
	}
	proxy.Up()
	if r := ins[1].client(t, k.Key).do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("revoked key after Redis is back: %d %s", r.Status, r.Body)
	}
}
