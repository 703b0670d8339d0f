package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/service"
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
	otherKB string // another knowledge base the manager manages
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
	f.otherKB = f.sharedKB(t)
	return f
}

// keyActors are API keys of the manager (the broadest member role), in the
// order of each keyMatrix want: all scopes; every scope but the ones the
// route needs; all scopes but limited to another knowledge base.
var keyActors = []string{"key", "key-noscope", "key-otherkb"}

// keyClient returns a client authenticated with a new API key of the
// manager: the route's scope removed for "key-noscope", limited to
// f.otherKB for "key-otherkb".
func (f *accessFixture) keyClient(t *testing.T, who, route string) *client {
	t.Helper()
	body := map[string]any{"name": who + " " + route, "scopes": []string{"read", "search", "chat", "ingest"}}
	switch who {
	case "key-noscope":
		var scopes []string
		for _, s := range []string{"read", "search", "chat", "ingest"} {
			if !slices.Contains(api.KeyScopes(route), service.Scope(s)) {
				scopes = append(scopes, s)
			}
		}
		body["scopes"] = scopes
	case "key-otherkb":
		body["knowledgeBaseIds"] = []string{f.otherKB}
	}
	r := f.clients["manager"].forTest(t).do("POST", "/api/v1/api-keys", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", who, r.Status, r.Body)
	}
	var k struct{ ID, Key string }
	r.json(t, &k)
	// Revoked after the subtest: the manager would otherwise pass the
	// per-user key limit over the whole matrix.
	t.Cleanup(func() { f.clients["manager"].forTest(t).do("DELETE", "/api/v1/api-keys/"+k.ID, nil) })
	return f.in.client(t, k.Key)
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

// firstChunk is the id of the fixture document's first chunk.
func (f *accessFixture) firstChunk(t *testing.T) string {
	t.Helper()
	return f.admin.forTest(t).curatedChunks(f.doc)[0].ID
}

// freshChunk adds a chunk to the fixture document as the admin.
func (f *accessFixture) freshChunk(t *testing.T) string {
	t.Helper()
	f.n++
	r := f.admin.forTest(t).do("POST", "/api/v1/documents/"+f.doc+"/chunks", map[string]any{"content": fmt.Sprintf("fresh note %d", f.n)})
	if r.Status != http.StatusCreated {
		t.Fatalf("add chunk: %d %s", r.Status, r.Body)
	}
	var c struct{ ID string }
	r.json(t, &c)
	return c.ID
}

// answerID is the id of the answer in the viewer's conversation.
func (f *accessFixture) answerID(t *testing.T) string {
	t.Helper()
	var msgs struct{ Messages []struct{ ID, Role string } }
	f.admin.forTest(t).do("GET", "/api/v1/conversations/"+f.conv+"/messages", nil).json(t, &msgs)
	for _, m := range msgs.Messages {
		if m.Role == "assistant" {
			return m.ID
		}
	}
	t.Fatal("the viewer's conversation has no answer")
	return ""
}

// freshDoc uploads a new document into the shared knowledge base.
func (f *accessFixture) freshDoc(t *testing.T) string {
	t.Helper()
	f.n++
	return f.admin.forTest(t).uploadAccepted(f.kb, fmt.Sprintf("note-%d.txt", f.n), []byte(fmt.Sprintf("note number %d", f.n))).ID
}

// freshExternalDoc uploads a new document with an external id into the
// shared knowledge base and returns the external id.
func (f *accessFixture) freshExternalDoc(t *testing.T) string {
	t.Helper()
	f.n++
	ext := fmt.Sprintf("ext-%d", f.n)
	r := f.admin.forTest(t).uploadExternal(f.kb, ext, fmt.Sprintf("note-%d.txt", f.n), []byte(fmt.Sprintf("external note %d", f.n)))
	if r.Status != http.StatusAccepted {
		t.Fatalf("upload %s: %d %s", ext, r.Status, r.Body)
	}
	return ext
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
	// Pipelines: delete by external id, and import from a URL (.invalid
	// never resolves, so the fetch fails without leaving the machine).
	"DELETE /api/v1/knowledge-bases/:id/documents": {[6]int{hidden, denied, gone, gone, gone, gone}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		ext := f.freshExternalDoc(t)
		return c.do("DELETE", "/api/v1/knowledge-bases/"+f.kb+"/documents?externalId="+ext, nil).Status
	}},
	"POST /api/v1/knowledge-bases/:id/documents:import": {[6]int{hidden, denied, accepted, accepted, accepted, accepted}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("POST", "/api/v1/knowledge-bases/"+f.kb+"/documents:import", map[string]string{"url": "https://fetch.invalid/" + who + ".txt"}).Status
	}},
	// Webhooks are knowledge-base settings (managers). .invalid never
	// resolves: deliveries fail without leaving the machine.
	"GET /api/v1/knowledge-bases/:id/webhooks": {[6]int{hidden, denied, denied, fine, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/knowledge-bases/"+f.kb+"/webhooks", nil).Status
	}},
	"POST /api/v1/knowledge-bases/:id/webhooks": {[6]int{hidden, denied, denied, created, denied, created}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("POST", "/api/v1/knowledge-bases/"+f.kb+"/webhooks", map[string]string{"url": "https://hooks.invalid/" + who}).Status
	}},
	"DELETE /api/v1/knowledge-bases/:id/webhooks/:webhookId": {[6]int{hidden, denied, denied, gone, denied, gone}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		r := f.admin.forTest(t).do("POST", "/api/v1/knowledge-bases/"+f.kb+"/webhooks", map[string]string{"url": "https://hooks.invalid/x"})
		var w struct{ ID string }
		r.json(t, &w)
		return c.do("DELETE", "/api/v1/knowledge-bases/"+f.kb+"/webhooks/"+w.ID, nil).Status
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
	// Chunk curation: editors and above (a group's editors too); viewers
	// read the chunks but may not change them.
	"PATCH /api/v1/chunks/:id": {[6]int{hidden, denied, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("PATCH", "/api/v1/chunks/"+f.firstChunk(t), map[string]any{"content": "The zebrafish policy grants fifteen days of leave (checked by " + who + ")."}).Status
	}},
	"POST /api/v1/documents/:id/chunks": {[6]int{hidden, denied, created, created, created, created}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("POST", "/api/v1/documents/"+f.doc+"/chunks", map[string]any{"content": "A note added by " + who}).Status
	}},
	"POST /api/v1/knowledge-bases/:id/chunks": {[6]int{hidden, denied, created, created, created, created}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("POST", "/api/v1/knowledge-bases/"+f.kb+"/chunks", map[string]any{"question": "Who wrote this?", "answer": who}).Status
	}},
	"DELETE /api/v1/chunks/:id": {[6]int{hidden, denied, gone, gone, gone, gone}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("DELETE", "/api/v1/chunks/"+f.freshChunk(t), nil).Status
	}},
	"GET /api/v1/chunks/:id/revisions": {[6]int{hidden, denied, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/chunks/"+f.freshChunk(t)+"/revisions", nil).Status
	}},
	"POST /api/v1/chunks/:id/revisions/:revision/restore": {[6]int{hidden, denied, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("POST", "/api/v1/chunks/"+f.freshChunk(t)+"/revisions/1/restore", nil).Status
	}},
	// The deletions hold text no longer in the document: editors, as the
	// history (restoring a deleted chunk: TestRestoreDeletedChunkAccess).
	"GET /api/v1/documents/:id/deleted-chunks": {[6]int{hidden, denied, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/documents/"+f.doc+"/deleted-chunks", nil).Status
	}},
	// Feedback: whoever sees the conversation (its owner, admins); the
	// feedback pages are admins'.
	"POST /api/v1/messages/:id/feedback": {[6]int{hidden, fine, hidden, hidden, hidden, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("POST", "/api/v1/messages/"+f.answerID(t)+"/feedback", map[string]any{"rating": "down"}).Status
	}},
	"GET /api/v1/admin/feedback": {[6]int{denied, denied, denied, denied, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/admin/feedback?knowledgeBaseId="+f.kb, nil).Status
	}},
	// Nothing is judged in the other knowledge base: the admin's export
	// finds nothing there.
	"GET /api/v1/admin/feedback/export": {[6]int{denied, denied, denied, denied, denied, hidden}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/admin/feedback/export?knowledgeBaseId="+f.otherKB, nil).Status
	}},
	"PUT /api/v1/admin/feedback/:id/chunks": {[6]int{denied, denied, denied, denied, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		r := f.admin.forTest(t).do("POST", "/api/v1/messages/"+f.answerID(t)+"/feedback", map[string]any{"rating": "down"})
		var fb struct{ ID string }
		r.json(t, &fb)
		return c.do("PUT", "/api/v1/admin/feedback/"+fb.ID+"/chunks", map[string]any{"chunkIds": []string{f.firstChunk(t)}}).Status
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
	// The OpenAI-compatible API: a knowledge base is a model, listed and
	// answered only for those who may read it (ragent/<id> here; names
	// resolve the same way, TestOpenAIModelsFollowAccess).
	"GET /v1/models": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return listed(c.do("GET", "/v1/models", nil), f.kb)
	}},
	"POST /v1/chat/completions": {[6]int{hidden, fine, fine, fine, fine, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		r := c.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent/" + f.kb, "messages": []map[string]string{{"role": "user", "content": "zebrafish leave?"}}})
		if r.Status == http.StatusOK && !strings.Contains(string(r.Body), f.doc) {
			t.Errorf("the answer cites nothing of the readable document: %s", r.Body)
		}
		return r.Status
	}},
	// The limiter page shows counts only, no knowledge-base data; it stays
	// admin-only.
	"GET /api/v1/admin/limiter": {[6]int{denied, denied, denied, denied, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/admin/limiter", nil).Status
	}},
	// The audit log names the knowledge bases and documents of everyone's
	// changes (ids and names in targets and details); only admins read it,
	// whatever their knowledge-base roles.
	"GET /api/v1/admin/audit": {[6]int{denied, denied, denied, denied, denied, fine}, func(t *testing.T, f *accessFixture, _ string, c *client) int {
		return c.do("GET", "/api/v1/admin/audit?target="+f.kb, nil).Status
	}},
	// An API key may name only knowledge bases its owner reads.
	"POST /api/v1/api-keys": {[6]int{hidden, created, created, created, created, created}, func(t *testing.T, f *accessFixture, who string, c *client) int {
		return c.do("POST", "/api/v1/api-keys", map[string]any{"name": "by " + who, "scopes": []string{"read"}, "knowledgeBaseIds": []string{f.kb}}).Status
	}},
}

// keyMatrix is what the manager's API keys get on every isolationMatrix
// route (keyActors order): a key does what its owner does, narrowed by its
// scopes (never more than editor) and knowledge bases; routes outside the
// scope table (settings, members, admin pages, API keys) are refused.
var keyMatrix = map[string][3]int{
	"GET /api/v1/knowledge-bases":                            {fine, denied, hidden},
	"POST /api/v1/knowledge-bases":                           {denied, denied, denied},
	"GET /api/v1/knowledge-bases/:id":                        {fine, denied, hidden},
	"PATCH /api/v1/knowledge-bases/:id":                      {denied, denied, denied},
	"DELETE /api/v1/knowledge-bases/:id":                     {denied, denied, denied},
	"GET /api/v1/knowledge-bases/:id/members":                {denied, denied, denied},
	"POST /api/v1/knowledge-bases/:id/members":               {denied, denied, denied},
	"DELETE /api/v1/knowledge-bases/:id/members/:memberId":   {denied, denied, denied},
	"GET /api/v1/knowledge-bases/:id/documents":              {fine, denied, hidden},
	"POST /api/v1/knowledge-bases/:id/documents":             {accepted, denied, hidden},
	"GET /api/v1/documents/:id":                              {fine, denied, hidden},
	"DELETE /api/v1/knowledge-bases/:id/documents":           {gone, denied, hidden},
	"POST /api/v1/knowledge-bases/:id/documents:import":      {accepted, denied, hidden},
	"GET /api/v1/knowledge-bases/:id/webhooks":               {denied, denied, denied},
	"POST /api/v1/knowledge-bases/:id/webhooks":              {denied, denied, denied},
	"DELETE /api/v1/knowledge-bases/:id/webhooks/:webhookId": {denied, denied, denied},
	"DELETE /api/v1/documents/:id":                           {gone, denied, hidden},
	"POST /api/v1/documents/:id/reindex":                     {accepted, denied, hidden},
	"GET /api/v1/documents/:id/chunks":                       {fine, denied, hidden},
	"PATCH /api/v1/chunks/:id":                               {fine, denied, hidden},
	"POST /api/v1/documents/:id/chunks":                      {created, denied, hidden},
	"POST /api/v1/knowledge-bases/:id/chunks":                {created, denied, hidden},
	"DELETE /api/v1/chunks/:id":                              {gone, denied, hidden},
	"GET /api/v1/chunks/:id/revisions":                       {fine, denied, hidden},
	"POST /api/v1/chunks/:id/revisions/:revision/restore":    {fine, denied, hidden},
	"GET /api/v1/documents/:id/deleted-chunks":               {fine, denied, hidden},
	"POST /api/v1/messages/:id/feedback":                     {hidden, denied, hidden}, // the viewer's answer
	"GET /api/v1/admin/feedback":                             {denied, denied, denied},
	"GET /api/v1/admin/feedback/export":                      {denied, denied, denied},
	"PUT /api/v1/admin/feedback/:id/chunks":                  {denied, denied, denied},
	"POST /api/v1/search":                                    {fine, denied, hidden},
	"POST /api/v1/chat":                                      {fine, denied, hidden},
	"GET /api/v1/conversations":                              {hidden, denied, hidden}, // the viewer's conversation
	"GET /api/v1/conversations/:id/messages":                 {hidden, denied, hidden},
	"PATCH /api/v1/conversations/:id":                        {hidden, denied, hidden},
	"DELETE /api/v1/conversations/:id":                       {hidden, denied, hidden},
	"GET /api/v1/admin/limiter":                              {denied, denied, denied},
	"POST /api/v1/api-keys":                                  {denied, denied, denied},
	"GET /api/v1/admin/audit":                                {denied, denied, denied},
	"GET /v1/models":                                         {fine, denied, hidden},
	"POST /v1/chat/completions":                              {fine, denied, hidden},
}

// noKnowledgeBaseData are the routes that neither take nor return a
// knowledge base, document, chunk or conversation (TestAuthorizationMatrix
// covers who may call them).
var noKnowledgeBaseData = []string{
	// The MCP server takes API keys only; TestMCPAccess checks its tools
	// against the same rules.
	"GET /mcp", "POST /mcp", "DELETE /mcp",
	// The chat widget takes widget keys only, which reach their own
	// knowledge bases and nothing else: TestWidgetKeyLimits checks another
	// knowledge base, other routes, origins, rates and a visitor's tasks.
	// Widget keys are created by admins only (TestAuthorizationMatrix).
	"GET /widget.js", "POST /api/v1/widget-keys",
	"POST /api/v1/widget/chat", "POST /api/v1/widget/chat/tasks/:taskId/stop", "GET /api/v1/widget/chat/tasks/:taskId/events",
	"OPTIONS /api/v1/widget/chat", "OPTIONS /api/v1/widget/chat/tasks/:taskId/stop", "OPTIONS /api/v1/widget/chat/tasks/:taskId/events",
	"GET /healthz", "GET /readyz", "GET /metrics", "GET /", "GET /assets/*filepath", "HEAD /assets/*filepath",
	"POST /api/v1/auth/login", "POST /api/v1/auth/logout", "POST /api/v1/auth/logout-all",
	// Single sign-on: the login page's buttons, the redirect and the callback.
	"GET /api/v1/auth/providers", "GET /api/v1/auth/oidc/login", "GET /api/v1/auth/oidc/callback",
	"GET /api/v1/me", "POST /api/v1/me/password", "GET /api/v1/limits",
	// Keys are listed and revoked by id; TestAPIKeys checks who may.
	"GET /api/v1/api-keys", "DELETE /api/v1/api-keys/:id",
	"GET /api/v1/users", "POST /api/v1/users", "PATCH /api/v1/users/:id", "DELETE /api/v1/users/:id",
	"GET /api/v1/groups", "POST /api/v1/groups", "PATCH /api/v1/groups/:id", "DELETE /api/v1/groups/:id",
	"GET /api/v1/groups/:id/members", "POST /api/v1/groups/:id/members", "DELETE /api/v1/groups/:id/members/:userId",
	// Usage is a user's own (TestUsageRecordedAcrossInstances), quotas admins'.
	"GET /api/v1/usage", "GET /api/v1/admin/quotas", "PUT /api/v1/admin/quotas", "DELETE /api/v1/admin/quotas/:subject/:id",
	// A task id is not a conversation: stop answers 404 to anyone but the
	// task's owner and admins (TestChatStopAcrossInstances); its events
	// only to the owner, within an API key's limits (TestChatResumeAccess).
	"POST /api/v1/chat/tasks/:taskId/stop", "GET /api/v1/chat/tasks/:taskId/events",
	// Intents name knowledge bases but are admin-only configuration.
	"GET /api/v1/admin/intents", "POST /api/v1/admin/intents", "PUT /api/v1/admin/intents/:id", "DELETE /api/v1/admin/intents/:id",
	"GET /api/v1/admin/term-mappings", "POST /api/v1/admin/term-mappings", "PUT /api/v1/admin/term-mappings/:id", "DELETE /api/v1/admin/term-mappings/:id",
}

// TestIsolationMatrix checks, for every route that takes or returns a
// knowledge base, document, chunk or conversation, what a non-member, a
// viewer, an editor, a manager, a member of an editor group and an admin
// get, and what the manager's API keys get with and without the route's
// scope and with another knowledge base. A route in the router with no row
// (and not listed as carrying no knowledge-base data), or with no key row,
// fails the test.
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
		keyRow, ok := keyMatrix[key]
		if !ok {
			t.Errorf("route %s has no row in keyMatrix", key)
			continue
		}
		for i, who := range keyActors {
			t.Run(key+"/"+who, func(t *testing.T) {
				c := f.keyClient(t, who, key)
				if got := row.call(t, f, who, c); got != keyRow[i] {
					t.Errorf("%s: got %d, want %d", who, got, keyRow[i])
				}
			})
		}
	}
}

// chatSources asks a question and returns the names of the cited
// documents and the answer text.
func chatSources(t *testing.T, c *client, body map[string]any) (names []string, answer string) {
	t.Helper()
	_, events := c.forTest(t).chatStream(context.Background(), body, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("sequence %q", got)
	}
	for _, e := range events {
		switch e.Name {
		case "sources":
			for _, s := range e.json(t)["sources"].([]any) {
				names = append(names, s.(map[string]any)["documentName"].(string))
			}
		case "message":
			answer += e.json(t)["delta"].(string)
		}
	}
	return names, answer
}

// An intent routes HR questions to a private knowledge base: a user who
// cannot read it gets an answer that cites nothing from it (the branch is
// skipped and the internal knowledge base searched instead), while a
// member of a group it is shared with, and an admin, get the HR document.
// Search over a mix of readable and unreadable ids is 404, and a search
// over everything leaves the private documents out.
func TestChatAndSearchSkipUnreadableKnowledgeBases(t *testing.T) {
	in := start(t, testConfig(t))
	adminToken := in.login(t, "admin", "admin-password")
	admin := in.client(t, adminToken)
	public := admin.createKB("public-faq")
	admin.makeInternal(public)
	hr := admin.createKB("hr-handbook")
	admin.waitReady(admin.uploadAccepted(public, "leave-faq.md", []byte("# Leave\n\nAsk your manager about leave; the zebrafish handbook is kept by HR.\n")).ID)
	admin.waitReady(admin.uploadAccepted(hr, "zebrafish-policy.md", []byte("# Zebrafish policy\n\nThe zebrafish policy grants fifteen days of annual leave, secret bonus codeword walrus.\n")).ID)
	mustIntent(t, admin, "POST", "/api/v1/admin/intents", map[string]any{
		"code": "hr", "name": "HR", "kind": "kb", "knowledgeBaseIds": []string{hr},
		"description": "zebrafish policy annual leave", "examples": []string{"how many days of zebrafish annual leave"},
	}, http.StatusCreated)

	in.createUser(t, adminToken, "outsider", "outsider-password", "user")
	in.createUser(t, adminToken, "hrstaff", "hrstaff-password", "user")
	outsider := in.client(t, in.login(t, "outsider", "outsider-password"))
	staff := in.client(t, in.login(t, "hrstaff", "hrstaff-password"))
	var g struct{ ID string }
	admin.do("POST", "/api/v1/groups", map[string]string{"name": "hr-team"}).json(t, &g)
	admin.do("POST", "/api/v1/groups/"+g.ID+"/members", map[string]string{"username": "hrstaff"})
	if r := admin.do("POST", "/api/v1/knowledge-bases/"+hr+"/members", map[string]string{"kind": "group", "name": "hr-team", "role": "viewer"}); r.Status != http.StatusCreated {
		t.Fatalf("share with the group: %d %s", r.Status, r.Body)
	}

	question := map[string]any{"question": "How many days of zebrafish annual leave?"}
	t.Run("admin is routed to the private knowledge base", func(t *testing.T) {
		names, _ := chatSources(t, admin, question)
		if !slices.Contains(names, "zebrafish-policy.md") {
			t.Fatalf("admin's sources %v, want the HR document", names)
		}
	})
	t.Run("group member is routed to it too", func(t *testing.T) {
		names, _ := chatSources(t, staff, question)
		if !slices.Contains(names, "zebrafish-policy.md") {
			t.Fatalf("group member's sources %v, want the HR document", names)
		}
	})
	t.Run("non-member gets nothing from it", func(t *testing.T) {
		names, answer := chatSources(t, outsider, question)
		if slices.Contains(names, "zebrafish-policy.md") || strings.Contains(answer, "walrus") || strings.Contains(answer, "fifteen") {
			t.Fatalf("outsider's sources %v / answer %q cite the private document", names, answer)
		}
		if !slices.Contains(names, "leave-faq.md") {
			t.Fatalf("outsider's sources %v, want the internal FAQ instead", names)
		}
	})
	t.Run("chat naming the private knowledge base is 404", func(t *testing.T) {
		r := outsider.do("POST", "/api/v1/chat", map[string]any{"question": "leave?", "knowledgeBaseIds": []string{public, hr}})
		if r.Status != http.StatusNotFound {
			t.Fatalf("got %d %s, want 404", r.Status, r.Body)
		}
	})
	t.Run("search over readable and unreadable ids is 404", func(t *testing.T) {
		r := outsider.do("POST", "/api/v1/search", map[string]any{"query": "zebrafish", "knowledgeBaseIds": []string{public, hr}})
		if r.Status != http.StatusNotFound || r.errorCode(t) != "not_found" {
			t.Fatalf("got %d %s, want 404", r.Status, r.Body)
		}
		if r := staff.do("POST", "/api/v1/search", map[string]any{"query": "zebrafish", "knowledgeBaseIds": []string{public, hr}}); r.Status != http.StatusOK {
			t.Fatalf("group member: %d %s", r.Status, r.Body)
		}
	})
	t.Run("search over everything leaves private documents out", func(t *testing.T) {
		r := outsider.do("POST", "/api/v1/search", map[string]any{"query": "zebrafish walrus", "topK": 50})
		if r.Status != http.StatusOK || strings.Contains(string(r.Body), "zebrafish-policy.md") || !strings.Contains(string(r.Body), "leave-faq.md") {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
}

// A saved answer's sources follow the reader's current access: when the
// viewer loses the grant, the sources disappear from their history (the
// answer text stays theirs); given back, they reappear. Admins reading the
// conversation see them.
func TestHistorySourcesFollowAccess(t *testing.T) {
	f := newAccessFixture(t)
	viewer := f.clients["viewer"].forTest(t)
	sources := func(c *client) int {
		t.Helper()
		var msgs struct {
			Messages []struct {
				Role    string
				Content string
				Sources []any
			}
		}
		r := c.do("GET", "/api/v1/conversations/"+f.conv+"/messages", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("messages: %d %s", r.Status, r.Body)
		}
		r.json(t, &msgs)
		if len(msgs.Messages) != 2 || msgs.Messages[1].Content == "" {
			t.Fatalf("messages %+v", msgs.Messages)
		}
		return len(msgs.Messages[1].Sources)
	}
	if n := sources(viewer); n == 0 {
		t.Fatal("the answer has no sources to begin with")
	}
	var members struct{ Items []struct{ ID, Name string } }
	f.admin.do("GET", "/api/v1/knowledge-bases/"+f.kb+"/members", nil).json(t, &members)
	for _, m := range members.Items {
		if m.Name == "viewer" {
			if r := f.admin.do("DELETE", "/api/v1/knowledge-bases/"+f.kb+"/members/"+m.ID, nil); r.Status != http.StatusNoContent {
				t.Fatalf("revoke: %d %s", r.Status, r.Body)
			}
		}
	}
	if n := sources(viewer); n != 0 {
		t.Fatalf("%d sources still shown after the grant was revoked", n)
	}
	if n := sources(f.admin); n == 0 {
		t.Fatal("admin sees no sources")
	}
	f.admin.makeInternal(f.kb)
	if n := sources(viewer); n == 0 {
		t.Fatal("sources hidden although the knowledge base is internal now")
	}
}

// A user's effective role is the highest of their direct and group grants.
func TestEffectiveRoleIsHighestGrant(t *testing.T) {
	f := newAccessFixture(t)
	// "group" has editor through the group; a direct viewer grant does not
	// lower it, and a direct manager grant raises it.
	f.grant(t, f.kb, "user", f.ids["group"], "viewer")
	c := f.clients["group"].forTest(t)
	role := func() string {
		var kb struct{ Role string }
		c.do("GET", "/api/v1/knowledge-bases/"+f.kb, nil).json(t, &kb)
		return kb.Role
	}
	if got := role(); got != "editor" {
		t.Fatalf("direct viewer + group editor = %q, want editor", got)
	}
	f.grant(t, f.kb, "user", f.ids["group"], "manager")
	if got := role(); got != "manager" {
		t.Fatalf("direct manager + group editor = %q, want manager", got)
	}
	// Deleting the group takes its grants with it.
	f.grant(t, f.kb, "user", f.ids["group"], "viewer")
	if r := f.admin.do("DELETE", "/api/v1/groups/"+f.groupID, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete group: %d %s", r.Status, r.Body)
	}
	if got := role(); got != "viewer" {
		t.Fatalf("after the group is deleted: %q, want viewer", got)
	}
}
