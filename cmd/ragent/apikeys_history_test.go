package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// chatTurn asks one question as c and returns the conversation it went to.
func chatTurn(t *testing.T, c *client, body map[string]any) string {
	t.Helper()
	status, events := c.forTest(t).chatStream(context.Background(), body, nil)
	if status != http.StatusOK || collapse(events) != "meta sources message finish done" {
		t.Fatalf("chat %v: %d %q", body, status, collapse(events))
	}
	return events[0].json(t)["conversationId"].(string)
}

// conversationIDs lists the conversations c sees, one page.
func conversationIDs(t *testing.T, c *client) []string {
	t.Helper()
	r := c.forTest(t).do("GET", "/api/v1/conversations?limit=200", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("list conversations: %d %s", r.Status, r.Body)
	}
	var l struct{ Items []struct{ ID string } }
	r.json(t, &l)
	var ids []string
	for _, it := range l.Items {
		ids = append(ids, it.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestAPIKeyHistoryWithinKnowledgeBases: a key limited to knowledge bases
// sees only the conversations whose every turn searched within its list —
// listed, read, renamed, deleted and continued (on /api/v1/chat and on the
// OpenAI-compatible API) — and every other conversation of its owner is not
// found, whatever the route: one that searched another knowledge base, one
// that searched everything the owner reads, one that turned to another
// knowledge base later, and one stored before turns recorded their
// knowledge bases. An unlimited key sees what its owner sees.
func TestAPIKeyHistoryWithinKnowledgeBases(t *testing.T) {
	cfg := testConfig(t)
	in := start(t, cfg)
	admin := in.adminClient(t)
	a, b := admin.createKB("kb-a"), admin.createKB("kb-b")
	admin.waitReady(admin.uploadAccepted(a, "a.md", []byte("# A\n\nThe walrus sleeps on the ice floe.\n")).ID)
	admin.waitReady(admin.uploadAccepted(b, "b.md", []byte("# B\n\nThe walrus secret is the okapi merger.\n")).ID)
	limited := in.client(t, createKey(t, admin, map[string]any{
		"name": "a only", "scopes": []string{"chat", "read"}, "knowledgeBaseIds": []string{a}}).Key)
	unlimited := in.client(t, createKey(t, admin, map[string]any{"name": "all", "scopes": []string{"chat", "read"}}).Key)

	convA := chatTurn(t, admin, map[string]any{"question": "Where does the walrus sleep?", "knowledgeBaseIds": []string{a}})
	convB := chatTurn(t, admin, map[string]any{"question": "What is the walrus secret?", "knowledgeBaseIds": []string{b}})
	convAll := chatTurn(t, admin, map[string]any{"question": "Tell me about the walrus"})
	convMixed := chatTurn(t, admin, map[string]any{"question": "Where does the walrus sleep?", "knowledgeBaseIds": []string{a}})
	chatTurn(t, admin, map[string]any{"question": "And its secret?", "conversationId": convMixed, "knowledgeBaseIds": []string{b}})
	convOld := chatTurn(t, admin, map[string]any{"question": "Where does the walrus sleep?", "knowledgeBaseIds": []string{a}})
	convKey := chatTurn(t, limited, map[string]any{"question": "Where does the walrus sleep?"})
	// A conversation from before the column: what it searched is unknown.
	db := connectDB(t, cfg.DatabaseURL)
	if _, err := db.Exec(context.Background(), `UPDATE messages SET knowledge_base_ids = NULL WHERE conversation_id = $1`, convOld); err != nil {
		t.Fatal(err)
	}
	for _, conv := range []string{convB, convAll, convMixed} {
		if msgs := conversationMessages(t, admin, conv); !strings.Contains(msgs[len(msgs)-1].Content, "okapi") {
			t.Fatalf("conversation %s does not quote B to begin with: %+v", conv, msgs)
		}
	}
	hidden := map[string]string{"B": convB, "everything": convAll, "A then B": convMixed, "unknown": convOld}

	t.Run("list", func(t *testing.T) {
		want := []string{convA, convKey}
		slices.Sort(want)
		if got := conversationIDs(t, limited); !slices.Equal(got, want) {
			t.Fatalf("limited key lists %v, want %v", got, want)
		}
		all := []string{convA, convB, convAll, convMixed, convOld, convKey}
		slices.Sort(all)
		for name, c := range map[string]*client{"owner": admin, "unlimited key": unlimited} {
			if got := conversationIDs(t, c); !slices.Equal(got, all) {
				t.Fatalf("%s lists %v, want %v", name, got, all)
			}
		}
		for name, conv := range hidden {
			if r := limited.do("GET", "/api/v1/conversations?cursor="+conv, nil); r.Status != http.StatusBadRequest {
				t.Errorf("cursor %s (%s): %d %s, want 400", conv, name, r.Status, r.Body)
			}
		}
	})

	t.Run("read, rename, delete, continue", func(t *testing.T) {
		for name, conv := range hidden {
			for _, r := range []response{
				limited.do("GET", "/api/v1/conversations/"+conv+"/messages", nil),
				limited.do("PATCH", "/api/v1/conversations/"+conv, map[string]any{"title": "mine now"}),
				limited.do("DELETE", "/api/v1/conversations/"+conv, nil),
				limited.do("POST", "/api/v1/chat", map[string]any{"question": "Repeat your last answer", "conversationId": conv}),
			} {
				if r.Status != http.StatusNotFound || strings.Contains(string(r.Body), "okapi") {
					t.Errorf("%s conversation: %d %s, want 404", name, r.Status, r.Body)
				}
			}
			r := limited.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("Repeat your last answer")},
				"X-Ragent-Conversation", conv)
			if r.Status != http.StatusNotFound || oaiError(t, r).Code != "not_found" {
				t.Errorf("%s conversation on the OpenAI API: %d %s, want 404", name, r.Status, r.Body)
			}
			if msgs := conversationMessages(t, unlimited, conv); len(msgs) < 2 {
				t.Errorf("%s conversation changed by the refused calls, or hidden from the unlimited key: %+v", name, msgs)
			}
		}
		for _, conv := range []string{convA, convKey} {
			if msgs := conversationMessages(t, limited, conv); len(msgs) != 2 {
				t.Fatalf("limited key reads %s: %+v", conv, msgs)
			}
			chatTurn(t, limited, map[string]any{"question": "And where does it swim?", "conversationId": conv})
			r := limited.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent", "messages": userMsg("And where does it eat?")},
				"X-Ragent-Conversation", conv)
			if r.Status != http.StatusOK || strings.Contains(string(r.Body), "okapi") {
				t.Fatalf("limited key continues %s on the OpenAI API: %d %s", conv, r.Status, r.Body)
			}
			if r := limited.do("PATCH", "/api/v1/conversations/"+conv, map[string]any{"title": "walrus"}); r.Status != http.StatusOK {
				t.Fatalf("rename %s: %d %s", conv, r.Status, r.Body)
			}
		}
		if msgs := conversationMessages(t, limited, convKey); len(msgs) != 6 {
			t.Fatalf("the key's conversation after two more turns: %+v", msgs)
		}
	})

	t.Run("a later turn outside the list hides the conversation", func(t *testing.T) {
		chatTurn(t, admin, map[string]any{"question": "What is the walrus secret?", "conversationId": convKey})
		if r := limited.do("GET", "/api/v1/conversations/"+convKey+"/messages", nil); r.Status != http.StatusNotFound {
			t.Fatalf("after the owner searched B in it: %d %s, want 404", r.Status, r.Body)
		}
		if got := conversationIDs(t, limited); !slices.Equal(got, []string{convA}) {
			t.Fatalf("limited key lists %v, want only %s", got, convA)
		}
		if r := unlimited.do("DELETE", "/api/v1/conversations/"+convKey, nil); r.Status != http.StatusNoContent {
			t.Fatalf("unlimited key deletes it: %d %s", r.Status, r.Body)
		}
	})
}
