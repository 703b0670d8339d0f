package main

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// errorJSON is an error response.
type errorJSON struct {
	Error struct{ Code, Message string } `json:"error"`
}

// wantInvalid fails unless r is a 400 `invalid` whose message mentions each
// of words.
func wantInvalid(t *testing.T, r response, words ...string) {
	t.Helper()
	if r.Status != http.StatusBadRequest {
		t.Fatalf("got %d %s, want 400", r.Status, r.Body)
	}
	var e errorJSON
	r.json(t, &e)
	if e.Error.Code != "invalid" {
		t.Fatalf("code %q (%s), want invalid", e.Error.Code, r.Body)
	}
	for _, w := range words {
		if !strings.Contains(e.Error.Message, w) {
			t.Fatalf("message %q does not mention %q", e.Error.Message, w)
		}
	}
}

// Postgres rejects U+0000 in text, so a NUL anywhere in a JSON string used to
// reach it and come back as a 500. Every JSON body is now checked at the edge.
func TestNULInJSONStringsIsInvalid(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	c := in.client(t, admin)
	kb := c.createKB("edges")

	tests := []struct {
		name, method, path string
		body               string
		field              string
	}{
		{"knowledge base name", "POST", "/api/v1/knowledge-bases", `{"name":"a\u0000b"}`, "name"},
		{"knowledge base description", "PATCH", "/api/v1/knowledge-bases/" + kb, `{"description":"x\u0000"}`, "description"},
		{"login username", "POST", "/api/v1/auth/login", `{"username":"ad\u0000min","password":"admin-password"}`, "username"},
		{"user password", "POST", "/api/v1/users", `{"username":"u1","password":"pass\u0000word1","role":"user"}`, "password"},
		{"term mapping", "POST", "/api/v1/admin/term-mappings", `{"sourceTerm":"k8s\u0000","targetTerm":"Kubernetes","enabled":true}`, "sourceTerm"},
		{"intent example", "POST", "/api/v1/admin/intents", `{"code":"c1","name":"n","kind":"system","examples":["ok","bad\u0000"]}`, "examples[1]"},
		{"chat question", "POST", "/api/v1/chat", `{"question":"hello\u0000"}`, "question"},
		{"search query", "POST", "/api/v1/search", `{"query":"vpn\u0000"}`, "query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantInvalid(t, c.forTest(t).do(tt.method, tt.path, tt.body), tt.field, "NUL")
		})
	}

	t.Run("conversation title", func(t *testing.T) {
		conv := chatOnce(t, c, "what is a NUL?")
		wantInvalid(t, c.forTest(t).do("PATCH", "/api/v1/conversations/"+conv, `{"title":"t\u0000"}`), "title", "NUL")
	})
}

// The upload's file name is stored as the document name; a NUL in it (raw or
// RFC 2231-encoded) is refused before anything is stored.
func TestNULInUploadFilenameIsInvalid(t *testing.T) {
	in := start(t, testConfig(t))
	c := in.adminClient(t)
	kb := c.createKB("edges")
	tests := []struct {
		name, disposition string
		words             []string
	}{
		// A raw NUL is refused by the MIME header parser already.
		{"raw", "form-data; name=\"file\"; filename=\"a\x00b.txt\"", []string{"multipart"}},
		{"percent-encoded", "form-data; name=\"file\"; filename*=UTF-8''a%00b.txt", []string{"file name", "NUL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := "--XX\r\nContent-Disposition: " + tt.disposition + "\r\nContent-Type: text/plain\r\n\r\nhello world\r\n--XX--\r\n"
			r := c.forTest(t).do("POST", "/api/v1/knowledge-bases/"+kb+"/documents", []byte(body), "Content-Type", "multipart/form-data; boundary=XX")
			wantInvalid(t, r, tt.words...)
		})
	}
	var docs struct{ Items []struct{ Name string } }
	c.do("GET", "/api/v1/knowledge-bases/"+kb+"/documents", nil).json(t, &docs)
	if len(docs.Items) != 0 {
		t.Fatalf("documents stored: %v", docs.Items)
	}

	// Invalid UTF-8 (a name in a legacy encoding) is repaired, not refused.
	body := "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''a%ffb.txt\r\nContent-Type: text/plain\r\n\r\nhello world\r\n--XX--\r\n"
	if r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/documents", []byte(body), "Content-Type", "multipart/form-data; boundary=XX"); r.Status != http.StatusAccepted {
		t.Fatalf("invalid UTF-8 name: %d %s", r.Status, r.Body)
	}
	c.do("GET", "/api/v1/knowledge-bases/"+kb+"/documents", nil).json(t, &docs)
	if len(docs.Items) != 1 || docs.Items[0].Name != "a?b.txt" {
		t.Fatalf("documents %+v", docs.Items)
	}
}

// Chunk ordinals are int4 in Postgres: a cursor above int32 used to be a 500.
func TestChunkCursorOutOfRangeIsInvalid(t *testing.T) {
	in := start(t, testConfig(t))
	c := in.adminClient(t)
	kb := c.createKB("edges")
	doc := c.uploadAccepted(kb, "a.md", []byte("# A\n\nSome text about cursors.\n"))
	c.waitReady(doc.ID)
	for _, cursor := range []string{"2147483648", "9223372036854775807", "99999999999999999999", "-1", "x"} {
		t.Run(cursor, func(t *testing.T) {
			wantInvalid(t, c.forTest(t).do("GET", "/api/v1/documents/"+doc.ID+"/chunks?cursor="+url.QueryEscape(cursor), nil), "cursor")
		})
	}
	if r := c.do("GET", "/api/v1/documents/"+doc.ID+"/chunks?cursor=2147483647", nil); r.Status != http.StatusOK {
		t.Fatalf("largest int32 cursor: %d %s", r.Status, r.Body)
	}
}

// chatOnce asks a question in a new conversation and returns its id.
func chatOnce(t *testing.T, c *client, question string) string {
	t.Helper()
	status, events := c.forTest(t).chatStream(context.Background(), map[string]any{"question": question}, nil)
	if status != http.StatusOK || len(events) == 0 || events[0].Name != "meta" {
		t.Fatalf("chat: %d %v", status, events)
	}
	if fin := events[len(events)-2]; fin.Name != "finish" || fin.json(t)["status"] != "completed" {
		t.Fatalf("chat did not complete: %v", events)
	}
	return events[0].json(t)["conversationId"].(string)
}

// A conversation cursor must be one of the caller's own conversations: the
// page is positioned by the cursor row, so another user's id used to page
// through one's own list by a stranger's activity time.
func TestConversationCursorMustBeOwn(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "alice", "alice-password", "user")
	in.createUser(t, admin, "bob", "bob-password", "user")
	alice := in.client(t, in.login(t, "alice", "alice-password"))
	bob := in.client(t, in.login(t, "bob", "bob-password"))

	a1 := chatOnce(t, alice, "first question")
	a2 := chatOnce(t, alice, "second question")
	b1 := chatOnce(t, bob, "bob's question")

	var page struct {
		Items      []struct{ ID string }
		NextCursor *string
	}
	alice.do("GET", "/api/v1/conversations?limit=1", nil).json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != a2 || page.NextCursor == nil || *page.NextCursor != a2 {
		t.Fatalf("first page %+v", page)
	}
	alice.do("GET", "/api/v1/conversations?limit=1&cursor="+a2, nil).json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != a1 {
		t.Fatalf("second page %+v", page)
	}

	wantInvalid(t, alice.do("GET", "/api/v1/conversations?cursor="+b1, nil), "cursor")
	wantInvalid(t, alice.do("GET", "/api/v1/conversations?cursor=12345", nil), "cursor")
	wantInvalid(t, alice.do("GET", "/api/v1/conversations?cursor=0", nil), "cursor")

	// The last conversation of a page may be deleted before the next page is
	// asked for; it still positions the page.
	if r := alice.do("DELETE", "/api/v1/conversations/"+a2, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	alice.do("GET", "/api/v1/conversations?limit=1&cursor="+a2, nil).json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != a1 {
		t.Fatalf("page after a deleted cursor %+v", page)
	}
}

// Chat accepted up to 4,000 characters but retrieval only 2,000, so every
// question in between failed. There is one limit now, checked on the
// question after term mappings.
func TestQuestionLengthIsOneLimit(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	c := in.client(t, admin)
	kb := c.createKB("edges")
	doc := c.uploadAccepted(kb, "vpn.md", []byte("# VPN\n\nInstall the GlobalProtect client to connect to the VPN.\n"))
	c.waitReady(doc.ID)

	long := strings.Repeat("vpn ", 750) // 3,000 characters
	t.Run("search accepts 3000", func(t *testing.T) {
		if r := c.forTest(t).do("POST", "/api/v1/search", map[string]any{"query": long}); r.Status != http.StatusOK {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("chat answers 3000", func(t *testing.T) {
		chatOnce(t, c, long)
	})
	t.Run("search refuses 4001", func(t *testing.T) {
		wantInvalid(t, c.forTest(t).do("POST", "/api/v1/search", map[string]any{"query": strings.Repeat("长", 4001)}), "4000")
	})
	t.Run("chat refuses 4001", func(t *testing.T) {
		wantInvalid(t, c.forTest(t).do("POST", "/api/v1/chat", map[string]any{"question": strings.Repeat("长", 4001)}), "4000")
	})

	t.Run("mapped question too long", func(t *testing.T) {
		c := c.forTest(t)
		r := c.do("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "gp", "targetTerm": "GlobalProtect VPN client", "enabled": true})
		if r.Status != http.StatusCreated {
			t.Fatalf("create mapping: %d %s", r.Status, r.Body)
		}
		in.createUser(t, admin, "carol", "carol-password", "user")
		carol := in.client(t, in.login(t, "carol", "carol-password"))
		// 3,000 characters as asked, 12,000 after the mapping.
		q := strings.TrimSpace(strings.Repeat("gp ", 1000))
		r = carol.do("POST", "/api/v1/chat", map[string]any{"question": q})
		wantInvalid(t, r, "4000", "term mappings")
		var convs struct{ Items []any }
		carol.do("GET", "/api/v1/conversations", nil).json(t, &convs)
		if len(convs.Items) != 0 {
			t.Fatalf("a refused question was saved: %v", convs.Items)
		}
		// Under the limit once mapped, the same words are answered.
		chatOnce(t, carol, strings.Repeat("gp ", 100))
	})
}
