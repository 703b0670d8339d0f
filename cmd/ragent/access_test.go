package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The actors of the isolation matrix, in the order of each row's want.
var actors = []string{"nonmember", "viewer", "editor", "manager", "group", "admin"}

// accessFixture is a private knowledge base shared with a viewer, an
// editor, a manager and a group (editors) one user belongs to, with a ready
// document and a conversation of the viewer that cites it.
type accessFixture struct {
	in      *instance
	admin   *client
	clients map[string]*client
	ids     map[string]string // username → user id
	groupID string
	kb      string
	doc     string
	conv    string
	n       int // makes names unique
}

func newAccessFixture(t *testing.T) *accessFixture {
	t.Helper()
	in := start(t, testConfig(t))
	adminToken := in.login(t, "admin", "admin-password")
	f := &accessFixture{in: in, admin: in.client(t, adminToken), clients: map[string]*client{"admin": in.client(t, adminToken)}, ids: map[string]string{}}
	for _, name := range actors[:5] {
		f.ids[name] = in.createUser(t, adminToken, name, name+"-password", "user")
		f.clients[name] = in.client(t, in.login(t, name, name+"-password"))
	}
	r := f.admin.do("POST", "/api/v1/groups", map[string]string{"name": "support"})
	if r.Status != http.StatusCreated {
		t.Fatalf("create group: %d %s", r.Status, r.Body)
	}
	var g struct{ ID string }
	r.json(t, &g)
	f.groupID = g.ID
	if r := f.admin.do("POST", "/api/v1/groups/"+g.ID+"/members", map[string]string{"username": "group"}); r.Status != http.StatusCreated {
		t.Fatalf("add group member: %d %s", r.Status, r.Body)
	}
	f.kb = f.sharedKB(t)
	f.doc = f.admin.uploadAccepted(f.kb, "handbook.md", []byte("# Handbook\n\nThe zebrafish policy grants fifteen days of leave.\n")).ID
	f.admin.waitReady(f.doc)
	f.conv = f.viewerConversation(t)
	return f
}

// sharedKB creates a private knowledge base with the fixture's grants.
func (f *accessFixture) sharedKB(t *testing.T) string {
	t.Helper()
	f.n++
	kb := f.admin.forTest(t).createKB(fmt.Sprintf("private-%d", f.n))
	for who, role := range map[string]string{"viewer": "viewer", "editor": "editor", "manager": "manager"} {
		f.grant(t, kb, "user", f.ids[who], role)
	}
	f.grant(t, kb, "group", f.groupID, "editor")
	return kb
}

func (f *accessFixture) grant(t *testing.T, kb, kind, id, role string) string {
	t.Helper()
	r := f.admin.forTest(t).do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": kind, "principalId": id, "role": role})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("grant %s %s %s: %d %s", kind, id, role, r.Status, r.Body)
	}
	var m struct{ ID string }
	r.json(t, &m)
	return m.ID
}

// viewerConversation asks a question over the private knowledge base as
// the viewer and returns the conversation id.
func (f *accessFixture) viewerConversation(t *testing.T) string {
	t.Helper()
	_, events := f.clients["viewer"].forTest(t).chatStream(context.Background(),
		map[string]any{"question": "How many days does the zebrafish policy grant?", "knowledgeBaseIds": []string{f.kb}}, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("viewer's chat: %q", got)
	}
	return events[0].json(t)["conversationId"].(string)
}

// freshDoc uploads a new document into the shared knowledge base.
func (f *accessFixture) freshDoc(t *testing.T) string {
	t.Helper()
	f.n++
	return f.admin.forTest(t).uploadAccepted(f.kb, fmt.Sprintf("note-%d.txt", f.n), []byte(fmt.Sprintf("note number %d", f.n))).ID
}

// listed answers 200 when a list response names id, else 404: how a list
// route says "you can see it".
func listed(r response, id string) int {
	if r.Status != http.StatusOK {
		return r.Status
	}
	if strings.Contains(string(r.Body), `"`+id+`"`) {
		return http.StatusOK
	}
	return http.StatusNotFound
}

// isolationRow calls a route as one actor and returns the outcome
// compared with want (one status per actor, in actors order).
type isolationRow struct {
	want [6]int
	call func(t *testing.T, f *accessFixture, who string, c *client) int
}

const (
	fine     = http.StatusOK
	created  = http.StatusCreated
	accepted = http.StatusAccepted
	gone     = http.StatusNoContent
	hidden   = http.StatusNotFound
	denied   = http.StatusForbidden
)

// isolationMatrix has a row for every route that takes or returns a
// knowledge base, document, chunk or conversation.
var isolationMatrix = map[string]isolationRow{
	"GET /api/v1/knowledge-bases": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return listed(c.do("GET", "/api/v1/knowledge-bases?limit=200", nil), f.kb)
	}},
	"POST /api/v1/knowledge-bases": {[6]int{denied, denied, denied, denied, denied, created}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("POST", "/api/v1/knowledge-bases", map[string]any{"name": "new-by-" + who}).Status
	}},
	"GET /api/v1/knowledge-bases/:id": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/knowledge-bases/"+f.kb, nil).Status
	}},
	"PATCH /api/v1/knowledge-bases/:id": {[6]int{hidden, denied, denied, fine, denied, fine}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("PATCH", "/api/v1/knowledge-bases/"+f.kb, map[string]any{"description": "edited by " + who}).Status
	}},
	"DELETE /api/v1/knowledge-bases/:id": {[6]int{hidden, denied, denied, gone, denied, gone}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("DELETE", "/api/v1/knowledge-bases/"+f.sharedKB(t), nil).Status
	}},
	"GET /api/v1/knowledge-bases/:id/members": {[6]int{hidden, denied, denied, fine, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/knowledge-bases/"+f.kb+"/members", nil).Status
	}},
	"POST /api/v1/knowledge-bases/:id/members": {[6]int{hidden, denied, denied, created, denied, created}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		kb := f.sharedKB(t)
		return c.do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": "user", "name": "nonmember", "role": "viewer"}).Status
	}},
	"DELETE /api/v1/knowledge-bases/:id/members/:memberId": {[6]int{hidden, denied, denied, gone, denied, gone}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		kb := f.sharedKB(t)
		m := f.grant(t, kb, "group", f.groupID, "editor") // the grant sharedKB made
		return c.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/members/"+m, nil).Status
	}},
	"GET /api/v1/knowledge-bases/:id/documents": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return listed(c.do("GET", "/api/v1/knowledge-bases/"+f.kb+"/documents?limit=200", nil), f.doc)
	}},
	"POST /api/v1/knowledge-bases/:id/documents": {[6]int{hidden, denied, accepted, accepted, accepted, accepted}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.upload(f.kb, who+".txt", []byte("uploaded by "+who)).Status
	}},
	"GET /api/v1/documents/:id": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/documents/"+f.doc, nil).Status
	}},
	"DELETE /api/v1/documents/:id": {[6]int{hidden, denied, gone, gone, gone, gone}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("DELETE", "/api/v1/documents/"+f.freshDoc(t), nil).Status
	}},
	"POST /api/v1/documents/:id/reindex": {[6]int{hidden, denied, accepted, accepted, accepted, accepted}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("POST", "/api/v1/documents/"+f.freshDoc(t)+"/reindex", nil).Status
	}},
	"GET /api/v1/documents/:id/chunks": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/documents/"+f.doc+"/chunks", nil).Status
	}},
	"POST /api/v1/search": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		r := c.do("POST", "/api/v1/search", map[string]any{"query": "zebrafish leave", "knowledgeBaseIds": []string{f.kb}})
		if r.Status == http.StatusOK && !strings.Contains(string(r.Body), f.doc) {
			t.Errorf("search found nothing of the readable document: %s", r.Body)
		}
		return r.Status
	}},
	"POST /api/v1/chat": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("POST", "/api/v1/chat", map[string]any{"question": "zebrafish leave?", "knowledgeBaseIds": []string{f.kb}}).Status
	}},
	"GET /api/v1/conversations": {[6]int{hidden, fine, hidden, hidden, hidden, hidden}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return listed(c.do("GET", "/api/v1/conversations?limit=200", nil), f.conv)
	}},
	"GET /api/v1/conversations/:id/messages": {[6]int{hidden, fine, hidden, hidden, hidden, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/conversations/"+f.conv+"/messages", nil).Status
	}},
	"PATCH /api/v1/conversations/:id": {[6]int{hidden, fine, hidden, hidden, hidden, hidden}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("PATCH", "/api/v1/conversations/"+f.conv, map[string]string{"title": "renamed by " + who}).Status
	}},
	"DELETE /api/v1/conversations/:id": {[6]int{hidden, gone, hidden, hidden, hidden, hidden}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("DELETE", "/api/v1/conversations/"+f.viewerConversation(t), nil).Status
	}},
	// The limiter page shows counts only, no knowledge-base data; it stays
	// admin-only.
	"GET /api/v1/admin/limiter": {[6]int{denied, denied, denied, denied, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/admin/limiter", nil).Status
	}},
}

// noKnowledgeBaseData are the routes that neither take nor return a
// knowledge base, document, chunk or conversation (TestAuthorizationMatrix
// covers who may call them).
var noKnowledgeBaseData = []string{
	"GET /healthz", "GET /readyz", "GET /metrics", "GET /", "GET /assets/*filepath", "HEAD /assets/*filepath",
	"POST /api/v1/auth/login", "POST /api/v1/auth/logout", "POST /api/v1/auth/logout-all",
	"GET /api/v1/me", "POST /api/v1/me/password",
	"GET /api/v1/users", "POST /api/v1/users", "PATCH /api/v1/users/:id", "DELETE /api/v1/users/:id",
	"GET /api/v1/groups", "POST /api/v1/groups", "PATCH /api/v1/groups/:id", "DELETE /api/v1/groups/:id",
	"GET /api/v1/groups/:id/members", "POST /api/v1/groups/:id/members", "DELETE /api/v1/groups/:id/members/:userId",
	// A task id is not a conversation: stop answers 404 to anyone but the
	// task's owner and admins (TestChatStopAcrossInstances).
	"POST /api/v1/chat/tasks/:taskId/stop",
	// Intents name knowledge bases but are admin-only configuration.
	"GET /api/v1/admin/intents", "POST /api/v1/admin/intents", "PUT /api/v1/admin/intents/:id", "DELETE /api/v1/admin/intents/:id",
	"GET /api/v1/admin/term-mappings", "POST /api/v1/admin/term-mappings", "PUT /api/v1/admin/term-mappings/:id", "DELETE /api/v1/admin/term-mappings/:id",
}

// TestIsolationMatrix checks, for every route that takes or returns a
// knowledge base, document, chunk or conversation, what a non-member, a
// viewer, an editor, a manager, a member of an editor group and an admin
// get. A route in the router with no row (and not listed as carrying no
// knowledge-base data) fails the test.
func TestIsolationMatrix(t *testing.T) {
	f := newAccessFixture(t)
	for _, r := range f.in.app.router.Routes() {
		key := r.Method + " " + r.Path
		row, ok := isolationMatrix[key]
		if !ok {
			if !slices.Contains(noKnowledgeBaseData, key) {
				t.Errorf("route %s has no row in isolationMatrix (nor is it in noKnowledgeBaseData)", key)
			}
			continue
		}
		for i, who := range actors {
			t.Run(key+"/"+who, func(t *testing.T) {
				c := f.clients[who].forTest(t)
				if got := row.call(t, f, who, c); got != row.want[i] {
					t.Errorf("%s: got %d, want %d", who, got, row.want[i])
				}
			})
		}
	}
}
