package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// auditEventJSON is an audit event as GET /api/v1/admin/audit returns it.
type auditEventJSON struct {
	ID          string `json:"id"`
	At          string `json:"at"`
	ActorUserID string `json:"actorUserId"`
	ActorName   string `json:"actorName"`
	Action      string `json:"action"`
	TargetType  string `json:"targetType"`
	TargetID    string `json:"targetId"`
	Result      string `json:"result"`
	Detail      string `json:"detail"`
	RequestID   string `json:"requestId"`
	IP          string `json:"ip"`
}

// auditEvents reads the whole audit log through the API, page by page, so
// the cursor is exercised too.
func auditEvents(t *testing.T, c *client, query string) []auditEventJSON {
	t.Helper()
	var all []auditEventJSON
	cursor := ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("audit paging does not end")
		}
		q := "/api/v1/admin/audit?limit=7&" + query
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := c.do("GET", q, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", q, r.Status, r.Body)
		}
		var l struct {
			Items      []auditEventJSON `json:"items"`
			NextCursor *string          `json:"nextCursor"`
		}
		r.json(t, &l)
		all = append(all, l.Items...)
		if l.NextCursor == nil {
			return all
		}
		cursor = *l.NextCursor
	}
}

// auditStart starts an instance behind a trusted proxy (loopback), so each
// request can claim its own client address, with a low login-failure limit.
func auditStart(t *testing.T) (*instance, Config) {
	cfg := testConfig(t)
	cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.LoginMaxFailures, cfg.LoginMaxFailuresPerUser = 2, 10
	return start(t, cfg), cfg
}

// TestAuditLogRecordsEachAction performs every audited action through the
// HTTP API, once succeeding and once failing, each request with its own
// request id and forwarded client address, and checks that each wrote
// exactly one event with the right actor, action, target, result, request
// id and address.
func TestAuditLogRecordsEachAction(t *testing.T) {
	in, _ := auditStart(t)
	adminToken := in.login(t, "admin", "admin-password")
	admin := in.client(t, adminToken)
	var me struct{ ID string }
	admin.do("GET", "/api/v1/me", nil).json(t, &me)
	ursulaID := in.createUser(t, adminToken, "ursula", "ursula-password", "user")
	ursula := in.client(t, in.login(t, "ursula", "ursula-password"))
	victimID := in.createUser(t, adminToken, "victim", "victim-password", "user")
	in.createUser(t, adminToken, "lockme", "lockme-password", "user")
	kb := admin.createKB("audited")
	doc := admin.uploadAccepted(kb, "policy.md", []byte("# Policy\n\nAudited content.\n"))
	admin.waitReady(doc.ID)
	missing := "999999999"

	// ids made by earlier steps, filled in as the table runs.
	var userID, groupID, memberID, intentID, termID, newKB, newDoc, keyID string

	type step struct {
		name   string
		as     *client
		do     func(c *client, h []string) (response, string) // returns the expected target id
		status int
		action string
		actor  string // user id; "" for none
		result string
	}
	idOf := func(t *testing.T, r response) string {
		var v struct{ ID string }
		r.json(t, &v)
		return v.ID
	}
	var tt *testing.T // the running subtest, for the closures below
	// send sends one JSON request. The ids fill the verbs of path when the
	// step runs, as earlier steps make some of them; the first one names
	// the step's target.
	send := func(method, path string, body any, ids ...*string) func(c *client, h []string) (response, string) {
		return func(c *client, h []string) (response, string) {
			args, target := make([]any, len(ids)), ""
			for i, id := range ids {
				args[i] = *id
			}
			if len(ids) > 0 {
				target = *ids[0]
			}
			return c.do(method, fmt.Sprintf(path, args...), body, h...), target
		}
	}
	// create posts body to path and keeps the new resource's id, the
	// step's target, in *id for the steps after it.
	create := func(id *string, path string, body any) func(c *client, h []string) (response, string) {
		return func(c *client, h []string) (response, string) {
			r := c.do("POST", path, body, h...)
			*id = idOf(tt, r)
			return r, *id
		}
	}
	upload := func(c *client, h []string, kbID string) response {
		contentType, body := uploadForm("notes.md", []byte("# Notes\n\nMore audited content.\n"))
		return c.do("POST", "/api/v1/knowledge-bases/"+kbID+"/documents", body, append(h, "Content-Type", contentType)...)
	}
	steps := []step{
		{"login", nil, func(c *client, h []string) (response, string) {
			return c.do("POST", "/api/v1/auth/login", map[string]string{"username": "admin", "password": "admin-password"}, h...), "admin"
		}, 200, "auth.login", me.ID, "success"},
		{"login wrong password", nil, func(c *client, h []string) (response, string) {
			return c.do("POST", "/api/v1/auth/login", map[string]string{"username": "ursula", "password": "wrong-password"}, h...), "ursula"
		}, 401, "auth.login", "", "denied"},
		{"login locked out", nil, func(c *client, h []string) (response, string) {
			// Two failures from this address (their own events, under
			// other request ids) reach the limit; the third attempt is
			// refused before the password is checked.
			for i := 0; i < 2; i++ {
				c.do("POST", "/api/v1/auth/login", map[string]string{"username": "lockme", "password": "wrong-password"}, "X-Forwarded-For", h[3])
			}
			return c.do("POST", "/api/v1/auth/login", map[string]string{"username": "lockme", "password": "lockme-password"}, h...), "lockme"
		}, 429, "auth.login", "", "locked"},

		{"own password wrong", nil, func(_ *client, h []string) (response, string) {
			return ursula.do("POST", "/api/v1/me/password", map[string]string{"oldPassword": "nope-nope", "newPassword": "ursula-password-2"}, h...), ursulaID
		}, 400, "auth.password_change", ursulaID, "invalid"},
		{"own password", nil, func(_ *client, h []string) (response, string) {
			r := ursula.do("POST", "/api/v1/me/password", map[string]string{"oldPassword": "ursula-password", "newPassword": "ursula-password-2"}, h...)
			var s struct{ Token string }
			r.json(tt, &s)
			ursula.token = s.Token
			return r, ursulaID
		}, 200, "auth.password_change", ursulaID, "success"},

		{"create user", admin, create(&userID, "/api/v1/users", map[string]string{"username": "walter", "password": "walter-password"}),
			201, "user.create", me.ID, "success"},
		{"create user taken", admin, send("POST", "/api/v1/users", map[string]string{"username": "walter", "password": "walter-password"}),
			409, "user.create", me.ID, "conflict"},
		{"change role", admin, send("PATCH", "/api/v1/users/%s", map[string]any{"role": "admin"}, &victimID),
			200, "user.update", me.ID, "success"},
		{"change role of nobody", admin, send("PATCH", "/api/v1/users/%s", map[string]any{"role": "admin"}, &missing),
			404, "user.update", me.ID, "not_found"},
		{"reset password", admin, send("PATCH", "/api/v1/users/%s", map[string]any{"password": "new-victim-password"}, &victimID),
			200, "user.update", me.ID, "success"},
		{"reset password too short", admin, send("PATCH", "/api/v1/users/%s", map[string]any{"password": "short"}, &victimID),
			400, "user.update", me.ID, "invalid"},
		{"delete self", admin, send("DELETE", "/api/v1/users/%s", nil, &me.ID),
			409, "user.delete", me.ID, "conflict"},
		// Refused by the router (admins only) before any use case runs.
		{"create user as a user", ursula, send("POST", "/api/v1/users", map[string]string{"username": "sneaky", "password": "sneaky-password"}),
			403, "user.create", ursulaID, "denied"},
		{"delete user as a user", ursula, send("DELETE", "/api/v1/users/%s", nil, &victimID),
			403, "user.delete", ursulaID, "denied"},
		{"create term mapping as a user", ursula, send("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "a", "targetTerm": "b"}),
			403, "term.create", ursulaID, "denied"},

		{"create group", admin, create(&groupID, "/api/v1/groups", map[string]string{"name": "auditors"}),
			201, "group.create", me.ID, "success"},
		{"create group without name", admin, send("POST", "/api/v1/groups", map[string]string{"name": " "}),
			400, "group.create", me.ID, "invalid"},
		{"rename group", admin, send("PATCH", "/api/v1/groups/%s", map[string]string{"name": "auditors-2"}, &groupID),
			200, "group.update", me.ID, "success"},
		{"rename missing group", admin, send("PATCH", "/api/v1/groups/%s", map[string]string{"name": "x"}, &missing),
			404, "group.update", me.ID, "not_found"},
		{"add group member", admin, send("POST", "/api/v1/groups/%s/members", map[string]string{"username": "ursula"}, &groupID),
			201, "group.member_add", me.ID, "success"},
		{"add unknown group member", admin, send("POST", "/api/v1/groups/%s/members", map[string]string{"username": "nobody"}, &groupID),
			400, "group.member_add", me.ID, "invalid"},
		{"remove group member", admin, send("DELETE", "/api/v1/groups/%s/members/%s", nil, &groupID, &ursulaID),
			204, "group.member_remove", me.ID, "success"},
		{"remove group non-member", admin, send("DELETE", "/api/v1/groups/%s/members/%s", nil, &groupID, &ursulaID),
			404, "group.member_remove", me.ID, "not_found"},
		{"delete group", admin, send("DELETE", "/api/v1/groups/%s", nil, &groupID),
			204, "group.delete", me.ID, "success"},
		{"delete missing group", admin, send("DELETE", "/api/v1/groups/%s", nil, &groupID),
			404, "group.delete", me.ID, "not_found"},

		{"create knowledge base", admin, create(&newKB, "/api/v1/knowledge-bases", map[string]string{"name": "second"}),
			201, "kb.create", me.ID, "success"},
		{"create knowledge base as a user", ursula, send("POST", "/api/v1/knowledge-bases", map[string]string{"name": "mine"}),
			403, "kb.create", ursulaID, "denied"},
		{"change visibility", admin, send("PATCH", "/api/v1/knowledge-bases/%s", map[string]string{"visibility": "internal"}, &newKB),
			200, "kb.update", me.ID, "success"},
		{"change visibility to nonsense", admin, send("PATCH", "/api/v1/knowledge-bases/%s", map[string]string{"visibility": "public"}, &newKB),
			400, "kb.update", me.ID, "invalid"},
		{"grant member", admin, func(c *client, h []string) (response, string) {
			r := c.do("POST", "/api/v1/knowledge-bases/"+newKB+"/members", map[string]string{"kind": "user", "name": "ursula", "role": "viewer"}, h...)
			memberID = idOf(tt, r)
			return r, newKB
		}, 201, "kb.member_put", me.ID, "success"},
		{"grant unknown role", admin, send("POST", "/api/v1/knowledge-bases/%s/members", map[string]string{"kind": "user", "name": "ursula", "role": "owner"}, &newKB),
			400, "kb.member_put", me.ID, "invalid"},
		{"revoke member", admin, send("DELETE", "/api/v1/knowledge-bases/%s/members/%s", nil, &newKB, &memberID),
			204, "kb.member_remove", me.ID, "success"},
		{"revoke missing member", admin, send("DELETE", "/api/v1/knowledge-bases/%s/members/%s", nil, &newKB, &memberID),
			404, "kb.member_remove", me.ID, "not_found"},
		{"change unreadable knowledge base", ursula, send("PATCH", "/api/v1/knowledge-bases/%s", map[string]string{"name": "mine now"}, &kb),
			404, "kb.update", ursulaID, "not_found"},

		{"upload", admin, func(c *client, h []string) (response, string) {
			r := upload(c, h, kb)
			newDoc = idOf(tt, r)
			return r, newDoc
		}, 202, "document.upload", me.ID, "success"},
		{"upload into a missing knowledge base", admin, func(c *client, h []string) (response, string) {
			return upload(c, h, missing), ""
		}, 404, "document.upload", me.ID, "not_found"},
		{"upload as a non-member", nil, func(_ *client, h []string) (response, string) {
			return upload(ursula, h, kb), ""
		}, 404, "document.upload", ursulaID, "not_found"},
		{"reindex", admin, send("POST", "/api/v1/documents/%s/reindex", nil, &doc.ID),
			202, "document.reindex", me.ID, "success"},
		{"reindex missing", admin, send("POST", "/api/v1/documents/%s/reindex", nil, &missing),
			404, "document.reindex", me.ID, "not_found"},
		{"delete document", admin, send("DELETE", "/api/v1/documents/%s", nil, &newDoc),
			204, "document.delete", me.ID, "success"},
		{"delete missing document", admin, send("DELETE", "/api/v1/documents/%s", nil, &newDoc),
			404, "document.delete", me.ID, "not_found"},
		{"delete knowledge base", admin, send("DELETE", "/api/v1/knowledge-bases/%s", nil, &newKB),
			204, "kb.delete", me.ID, "success"},
		{"delete missing knowledge base", admin, send("DELETE", "/api/v1/knowledge-bases/%s", nil, &newKB),
			404, "kb.delete", me.ID, "not_found"},

		{"create intent", admin, create(&intentID, "/api/v1/admin/intents", map[string]any{"code": "greet", "name": "Greeting", "kind": "system"}),
			201, "intent.create", me.ID, "success"},
		{"create intent without code", admin, send("POST", "/api/v1/admin/intents", map[string]any{"code": "", "name": "Nothing", "kind": "system"}),
			400, "intent.create", me.ID, "invalid"},
		{"update intent", admin, send("PUT", "/api/v1/admin/intents/%s", map[string]any{"code": "greet", "name": "Greetings", "kind": "system"}, &intentID),
			200, "intent.update", me.ID, "success"},
		{"update missing intent", admin, send("PUT", "/api/v1/admin/intents/%s", map[string]any{"code": "other", "name": "Other", "kind": "system"}, &missing),
			404, "intent.update", me.ID, "not_found"},
		{"delete intent", admin, send("DELETE", "/api/v1/admin/intents/%s", nil, &intentID),
			204, "intent.delete", me.ID, "success"},
		{"delete missing intent", admin, send("DELETE", "/api/v1/admin/intents/%s", nil, &intentID),
			404, "intent.delete", me.ID, "not_found"},

		{"create term mapping", admin, create(&termID, "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "k8s", "targetTerm": "Kubernetes"}),
			201, "term.create", me.ID, "success"},
		{"create duplicate term mapping", admin, send("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "K8S", "targetTerm": "Kubernetes!"}),
			409, "term.create", me.ID, "conflict"},
		{"update term mapping", admin, send("PUT", "/api/v1/admin/term-mappings/%s", map[string]any{"sourceTerm": "k8s", "targetTerm": "Kubernetes", "enabled": false}, &termID),
			200, "term.update", me.ID, "success"},
		{"update term mapping to itself", admin, send("PUT", "/api/v1/admin/term-mappings/%s", map[string]any{"sourceTerm": "k8s", "targetTerm": "k8s"}, &termID),
			400, "term.update", me.ID, "invalid"},
		{"delete term mapping", admin, send("DELETE", "/api/v1/admin/term-mappings/%s", nil, &termID),
			204, "term.delete", me.ID, "success"},
		{"delete missing term mapping", admin, send("DELETE", "/api/v1/admin/term-mappings/%s", nil, &termID),
			404, "term.delete", me.ID, "not_found"},

		{"create API key", ursula, create(&keyID, "/api/v1/api-keys", map[string]any{"name": "pipeline", "scopes": []string{"search"}}),
			201, "api_key.create", ursulaID, "success"},
		{"create API key without scopes", ursula, send("POST", "/api/v1/api-keys", map[string]any{"name": "nothing", "scopes": []string{}}),
			400, "api_key.create", ursulaID, "invalid"},
		{"revoke API key", ursula, send("DELETE", "/api/v1/api-keys/%s", nil, &keyID),
			204, "api_key.revoke", ursulaID, "success"},
		{"revoke missing API key", ursula, send("DELETE", "/api/v1/api-keys/%s", nil, &missing),
			404, "api_key.revoke", ursulaID, "not_found"},
	}

	type expect struct {
		step
		requestID, ip, target string
	}
	var expected []expect
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			tt = t
			c := s.as
			if c == nil {
				c = in.client(t, "")
			}
			c = c.forTest(t)
			rid, ip := fmt.Sprintf("audit-%d", i), fmt.Sprintf("203.0.113.%d", i+1)
			r, target := s.do(c, []string{"X-Request-ID", rid, "X-Forwarded-For", ip})
			if r.Status != s.status {
				t.Fatalf("status %d, want %d: %s", r.Status, s.status, r.Body)
			}
			expected = append(expected, expect{s, rid, ip, target})
		})
	}
	if t.Failed() {
		return
	}

	byRequest := map[string][]auditEventJSON{}
	for _, e := range auditEvents(t, admin, "") {
		byRequest[e.RequestID] = append(byRequest[e.RequestID], e)
	}
	for _, want := range expected {
		got := byRequest[want.requestID]
		if len(got) != 1 {
			t.Errorf("%s: %d events, want exactly one: %+v", want.name, len(got), got)
			continue
		}
		e := got[0]
		if e.Action != want.action || e.Result != want.result || e.ActorUserID != want.actor || e.IP != want.ip ||
			(want.target != "" && e.TargetID != want.target) {
			t.Errorf("%s: event %+v; want action %s result %s actor %q target %q ip %s",
				want.name, e, want.action, want.result, want.actor, want.target, want.ip)
		}
		if want.result != "success" && e.Detail == "" {
			t.Errorf("%s: a failure without the reason: %+v", want.name, e)
		}
	}

	// The filters select what they name.
	for _, f := range []struct {
		query string
		match func(e auditEventJSON) bool
	}{
		{"action=kb.update", func(e auditEventJSON) bool { return e.Action == "kb.update" }},
		{"actor=" + ursulaID, func(e auditEventJSON) bool { return e.ActorUserID == ursulaID }},
		{"target=" + newKB + "&result=success", func(e auditEventJSON) bool { return e.TargetID == newKB && e.Result == "success" }},
		{"result=locked", func(e auditEventJSON) bool { return e.Result == "locked" }},
	} {
		got := auditEvents(t, admin, f.query)
		if len(got) == 0 {
			t.Errorf("%s: no events", f.query)
		}
		for _, e := range got {
			if !f.match(e) {
				t.Errorf("%s: event %+v does not match", f.query, e)
			}
		}
	}
	all := auditEvents(t, admin, "")
	last := all[0] // newest first
	if got := auditEvents(t, admin, "since="+url.QueryEscape(last.At)); len(got) == 0 || len(got) == len(all) || got[0].ID != last.ID {
		t.Errorf("since=%s: %d of %d events", last.At, len(got), len(all))
	}
	if got := auditEvents(t, admin, "until="+url.QueryEscape(all[len(all)-1].At)); len(got) != 0 {
		t.Errorf("until the first event: %d events", len(got))
	}
	for _, q := range []string{"result=maybe", "since=yesterday", "actor=bob", "cursor=x"} {
		if r := admin.do("GET", "/api/v1/admin/audit?"+q, nil); r.Status != http.StatusBadRequest {
			t.Errorf("?%s: %d %s", q, r.Status, r.Body)
		}
	}
}

// TestAuditEventCommitsWithItsChange: a change and its event are one
// transaction. When the event cannot be written, the change is not stored
// either; and the stored log refuses updates and deletes.
func TestAuditEventCommitsWithItsChange(t *testing.T) {
	in, cfg := auditStart(t)
	admin := in.adminClient(t)
	ctx := context.Background()
	conn := connectDB(t, cfg.DatabaseURL)
	mustExec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The audit insert of a group creation fails, after the group row was
	// written in the same transaction.
	mustExec(`CREATE FUNCTION refuse_group_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.action = 'group.create' THEN RAISE EXCEPTION 'audit refused by the test'; END IF; RETURN NEW; END $$`)
	mustExec(`CREATE TRIGGER refuse_group_audit BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_group_audit()`)

	if r := admin.do("POST", "/api/v1/groups", map[string]string{"name": "unrecorded"}); r.Status != http.StatusInternalServerError {
		t.Fatalf("create group with its event refused: %d %s", r.Status, r.Body)
	}
	var groups struct{ Items []struct{ Name string } }
	admin.do("GET", "/api/v1/groups", nil).json(t, &groups)
	if len(groups.Items) != 0 {
		t.Fatalf("the group was stored without its audit event: %+v", groups.Items)
	}
	if got := auditEvents(t, admin, "action=group.create"); len(got) != 0 {
		t.Fatalf("events: %+v", got)
	}

	mustExec(`DROP TRIGGER refuse_group_audit ON audit_events`)
	if r := admin.do("POST", "/api/v1/groups", map[string]string{"name": "recorded"}); r.Status != http.StatusCreated {
		t.Fatalf("create group: %d %s", r.Status, r.Body)
	}
	if got := auditEvents(t, admin, "action=group.create"); len(got) != 1 || got[0].Result != "success" {
		t.Fatalf("events: %+v", got)
	}

	// Append-only, even for the application's own database role.
	for _, sql := range []string{
		`UPDATE audit_events SET result = 'success'`,
		`DELETE FROM audit_events`,
		`TRUNCATE audit_events`,
	} {
		_, err := conn.Exec(ctx, sql)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", sql, err)
		}
	}
}
