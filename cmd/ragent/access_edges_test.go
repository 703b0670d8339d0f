package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// memberID returns the id of username's direct grant on kb.
func memberID(t *testing.T, admin *client, kb, username string) string {
	t.Helper()
	var members struct{ Items []struct{ ID, Name string } }
	admin.forTest(t).do("GET", "/api/v1/knowledge-bases/"+kb+"/members", nil).json(t, &members)
	for _, m := range members.Items {
		if m.Name == username {
			return m.ID
		}
	}
	t.Fatalf("%s is no member of %s: %+v", username, kb, members.Items)
	return ""
}

// TestIdempotentReplayChecksAccessFirst: a stored answer is replayed only to
// a caller who may still make the change: a manager removed from the
// knowledge base gets 404, one demoted to viewer 403, a limited API key of
// the same user 404 for a knowledge base outside its list — never the stored
// 200. The same key replays again once the right is back.
func TestIdempotentReplayChecksAccessFirst(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.adminClient(t)
	adminToken := in.login(t, "admin", "admin-password")
	mgrID := in.createUser(t, adminToken, "mgr", "mgr-password", "user")
	mgr := in.client(t, in.login(t, "mgr", "mgr-password"))
	kb, other := admin.createKB("replayed"), admin.createKB("other")
	grant := func(kb, role string) {
		t.Helper()
		r := admin.do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": "user", "principalId": mgrID, "role": role})
		if r.Status != http.StatusCreated && r.Status != http.StatusOK {
			t.Fatalf("grant %s: %d %s", role, r.Status, r.Body)
		}
	}
	grant(kb, "manager")
	grant(other, "manager")

	patch := func(c *client, idemKey string) response {
		t.Helper()
		return c.do("PATCH", "/api/v1/knowledge-bases/"+kb, map[string]any{"description": "set by mgr"}, "Idempotency-Key", idemKey)
	}
	member := func(c *client, idemKey string) response {
		t.Helper()
		return c.do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": "user", "principalId": mgrID, "role": "manager"},
			"Idempotency-Key", idemKey)
	}
	if r := patch(mgr, "p1"); r.Status != http.StatusOK {
		t.Fatalf("first PATCH: %d %s", r.Status, r.Body)
	}
	if r := member(mgr, "m1"); r.Status != http.StatusOK {
		t.Fatalf("first member PUT: %d %s", r.Status, r.Body)
	}
	if r := patch(mgr, "p1"); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay while manager: %d %v", r.Status, r.Header)
	}

	grant(kb, "viewer")
	for name, r := range map[string]response{"PATCH": patch(mgr, "p1"), "members": member(mgr, "m1")} {
		if r.Status != http.StatusForbidden || r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("%s replay by a viewer: %d %s, want 403", name, r.Status, r.Body)
		}
	}
	if r := admin.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/members/"+memberID(t, admin, kb, "mgr"), nil); r.Status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", r.Status, r.Body)
	}
	for name, r := range map[string]response{"PATCH": patch(mgr, "p1"), "members": member(mgr, "m1")} {
		if r.Status != http.StatusNotFound || r.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("%s replay after removal: %d %s, want 404", name, r.Status, r.Body)
		}
	}

	// A key of the same user shares the user's Idempotency-Keys; a key
	// limited to another knowledge base does not see this one.
	grant(kb, "editor")
	imp := func(c *client) response {
		t.Helper()
		return c.do("POST", "/api/v1/knowledge-bases/"+kb+"/documents:import", map[string]any{"url": "http://127.0.0.1:1/doc.md"},
			"Idempotency-Key", "i1")
	}
	first := imp(mgr)
	if first.Status >= 500 {
		t.Fatalf("first import: %d %s", first.Status, first.Body)
	}
	limited := in.client(t, createKey(t, mgr, map[string]any{"name": "other only", "scopes": []string{"ingest"}, "knowledgeBaseIds": []string{other}}).Key)
	if r := imp(limited); r.Status != http.StatusNotFound || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("import replay by a key limited to another knowledge base: %d %s, want 404", r.Status, r.Body)
	}
	if r := imp(mgr); r.Status != first.Status || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("import replay by the editor: %d %v, want %d replayed", r.Status, r.Header, first.Status)
	}
	grant(kb, "manager")
	if r := patch(mgr, "p1"); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay with the role back: %d %v", r.Status, r.Header)
	}
}

// TestAPIKeyMaxTTLSetting: RAGENT_API_KEY_MAX_TTL bounds a new key's
// expiry: beyond it (the year 9999) is 400 on expiresAt, none given is the
// longest life.
func TestAPIKeyMaxTTLSetting(t *testing.T) {
	cfg := testConfig(t)
	cfg.APIKeyMaxTTL = 48 * time.Hour
	in := start(t, cfg)
	admin := in.adminClient(t)
	r := admin.do("POST", "/api/v1/api-keys", map[string]any{"name": "forever", "scopes": []string{"read"}, "expiresAt": "9999-12-31T00:00:00Z"})
	var e struct {
		Error struct {
			Code, Message string
			Details       map[string]string
		}
	}
	r.json(t, &e)
	if r.Status != http.StatusBadRequest || e.Error.Code != "invalid" || e.Error.Details["field"] != "expiresAt" || !strings.Contains(e.Error.Message, "2 days") {
		t.Fatalf("year 9999: %d %s, want 400 on expiresAt", r.Status, r.Body)
	}
	before := time.Now()
	k := createKey(t, admin, map[string]any{"name": "default", "scopes": []string{"read"}})
	keys, _ := listKeys(t, admin)
	for _, l := range keys {
		if l.ID == k.ID && (l.ExpiresAt == nil || l.ExpiresAt.Before(before.Add(48*time.Hour-time.Minute)) || l.ExpiresAt.After(time.Now().Add(48*time.Hour))) {
			t.Fatalf("key without an expiry expires %v, want in 48h", l.ExpiresAt)
		}
	}
	if r := in.client(t, k.Key).do("GET", "/api/v1/knowledge-bases", nil); r.Status != http.StatusOK {
		t.Fatalf("new key: %d %s", r.Status, r.Body)
	}
}

// TestAPIKeyCapUnderParallelCreates: 80 creates at once, across two
// instances, leave exactly 50 live keys (the per-user cap); the others are
// 409, and after a revocation exactly one more fits.
func TestAPIKeyCapUnderParallelCreates(t *testing.T) {
	cfg := testConfig(t)
	ins := []*instance{start(t, cfg), start(t, cfg)}
	adminToken := ins[0].login(t, "admin", "admin-password")
	ins[0].createUser(t, adminToken, "many", "many-password", "user")
	token := ins[0].login(t, "many", "many-password")
	const n = 80
	statuses := make([]int, n)
	testenv.Together(n, func(i int) {
		statuses[i] = ins[i%2].client(t, token).do("POST", "/api/v1/api-keys", map[string]any{"name": fmt.Sprintf("key %d", i), "scopes": []string{"read"}}).Status
	})
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 50 || count[http.StatusConflict] != n-50 {
		t.Fatalf("statuses %v, want 50 created and %d conflicts", count, n-50)
	}
	c := ins[0].client(t, token)
	var l struct{ Items []apiKeyJSON }
	c.do("GET", "/api/v1/api-keys?limit=200", nil).json(t, &l)
	if len(l.Items) != 50 {
		t.Fatalf("%d live keys, want 50", len(l.Items))
	}
	if r := c.do("DELETE", "/api/v1/api-keys/"+l.Items[0].ID, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	for i, want := range []int{http.StatusCreated, http.StatusConflict} {
		if r := c.do("POST", "/api/v1/api-keys", map[string]any{"name": fmt.Sprintf("after %d", i), "scopes": []string{"read"}}); r.Status != want {
			t.Fatalf("create %d after a revocation: %d %s, want %d", i, r.Status, r.Body, want)
		}
	}
}

// TestDocumentIDsRevealNothing: on every document route, a document of a
// knowledge base the caller cannot read answers exactly as an id that does
// not exist (the service reads access first, so the work is the same too:
// TestDocumentReadAccessFirst in service/ingest).
func TestDocumentIDsRevealNothing(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.adminClient(t)
	kb := admin.createKB("private")
	doc := admin.uploadAccepted(kb, "p.md", []byte("# P\n\nPrivate text.\n")).ID
	admin.waitReady(doc)
	adminToken := in.login(t, "admin", "admin-password")
	in.createUser(t, adminToken, "outsider", "outsider-password", "user")
	outsider := in.client(t, in.login(t, "outsider", "outsider-password"))
	missing := "386270546460467299"
	for _, route := range []struct{ method, path string }{
		{"GET", "/api/v1/documents/%s"}, {"GET", "/api/v1/documents/%s/chunks"},
		{"POST", "/api/v1/documents/%s/reindex"}, {"DELETE", "/api/v1/documents/%s"},
	} {
		got := outsider.do(route.method, fmt.Sprintf(route.path, doc), nil)
		want := outsider.do(route.method, fmt.Sprintf(route.path, missing), nil)
		if got.Status != http.StatusNotFound || got.Status != want.Status ||
			strings.ReplaceAll(string(got.Body), doc, missing) != string(want.Body) {
			t.Errorf("%s %s: %d %s for a private document, %d %s for a missing one", route.method, route.path, got.Status, got.Body, want.Status, want.Body)
		}
	}
	if d := admin.document(doc); d.Status != "ready" {
		t.Fatalf("the private document after the refused calls: %+v", d)
	}
}

// TestRenameRevealsNoPrivateNames: a manager may rename a knowledge base to
// the name of one they cannot read (a conflict would tell them it exists);
// a name they can see is 409, and admins, who see every knowledge base,
// keep names unique everywhere. A reader of two knowledge bases of one name
// names each by id on the OpenAI-compatible API.
func TestRenameRevealsNoPrivateNames(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.adminClient(t)
	adminToken := in.login(t, "admin", "admin-password")
	mgrID := in.createUser(t, adminToken, "mgr", "mgr-password", "user")
	bothID := in.createUser(t, adminToken, "both", "both-password", "user")
	mgr := in.client(t, in.login(t, "mgr", "mgr-password"))
	secret, mine, public := admin.createKB("secret-hr"), admin.createKB("mine"), admin.createKB("public-faq")
	admin.makeInternal(public)
	grant := func(kb, user, role string) {
		t.Helper()
		if r := admin.do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": "user", "principalId": user, "role": role}); r.Status != http.StatusCreated {
			t.Fatalf("grant: %d %s", r.Status, r.Body)
		}
	}
	grant(mine, mgrID, "manager")
	rename := func(c *client, kb, name string) response {
		t.Helper()
		return c.do("PATCH", "/api/v1/knowledge-bases/"+kb, map[string]string{"name": name})
	}
	if r := rename(mgr, mine, "public-faq"); r.Status != http.StatusConflict || r.errorCode(t) != "conflict" {
		t.Fatalf("to a name the manager reads: %d %s, want 409", r.Status, r.Body)
	}
	if r := rename(mgr, mine, "secret-hr"); r.Status != http.StatusOK || strings.Contains(string(r.Body), secret) {
		t.Fatalf("to a private name the manager cannot read: %d %s, want 200 like any free name", r.Status, r.Body)
	}
	if r := rename(mgr, mine, "secret-hr"); r.Status != http.StatusOK {
		t.Fatalf("keeping its own name: %d %s", r.Status, r.Body)
	}
	for name, r := range map[string]response{
		"admin rename": rename(admin, public, "secret-hr"),
		"admin create": admin.do("POST", "/api/v1/knowledge-bases", map[string]string{"name": "secret-hr"}),
	} {
		if r.Status != http.StatusConflict {
			t.Errorf("%s to a taken name: %d %s, want 409", name, r.Status, r.Body)
		}
	}

	grant(secret, bothID, "viewer")
	grant(mine, bothID, "viewer")
	both := in.client(t, createKey(t, in.client(t, in.login(t, "both", "both-password")), map[string]any{"name": "bot", "scopes": []string{"chat"}}).Key)
	r := both.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent/secret-hr", "messages": userMsg("hello")})
	if r.Status != http.StatusBadRequest || !strings.Contains(oaiError(t, r).Message, "by id") {
		t.Fatalf("an ambiguous model name: %d %s, want 400 naming ids", r.Status, r.Body)
	}
	var models struct{ Data []struct{ ID string } }
	both.do("GET", "/v1/models", nil).json(t, &models)
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	for _, kb := range []string{secret, mine} {
		if !slices.Contains(ids, "ragent/"+kb) || slices.Contains(ids, "ragent/secret-hr") {
			t.Fatalf("models %v: want both shared-name knowledge bases by id", ids)
		}
	}
	if r := both.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent/" + mine, "messages": userMsg("hello")}); r.Status != http.StatusOK {
		t.Fatalf("by id: %d %s", r.Status, r.Body)
	}
}
