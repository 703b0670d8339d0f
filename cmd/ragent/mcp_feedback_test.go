package main

import (
	"net/http"
	"strings"
	"testing"
)

type mcpFeedbackOut struct {
	ID, MessageID, ConversationID, Rating, Comment string
}

// mcpAnswer asks through MCP with key and returns the answer's message id.
func mcpAnswer(t *testing.T, f *mcpFixture, key string, args map[string]any) string {
	t.Helper()
	var out mcpAskOut
	structured(t, mustConnect(t, f.in, key).call("ask", args, nil), &out)
	if out.MessageID == "" || out.Status != "completed" {
		t.Fatalf("ask gave no message id: %+v", out)
	}
	return out.MessageID
}

// adminFeedback is the feedback the admin page lists for the message.
func adminFeedback(t *testing.T, f *mcpFixture, kb, messageID string) []mcpFeedbackOut {
	t.Helper()
	r := f.admin.do("GET", "/api/v1/admin/feedback?knowledgeBaseId="+kb, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("admin feedback: %d %s", r.Status, r.Body)
	}
	var page struct{ Items []mcpFeedbackOut }
	r.json(t, &page)
	var out []mcpFeedbackOut
	for _, it := range page.Items {
		if it.MessageID == messageID {
			out = append(out, it)
		}
	}
	return out
}

// TestMCPFeedback rates answers given through MCP by their message id:
// with the feedback tool and over HTTP with the same key, only answers the
// key can see, and the admin page lists them.
func TestMCPFeedback(t *testing.T) {
	f := newMCPFixture(t, nil)
	s := mustConnect(t, f.in, f.full)
	msg := mcpAnswer(t, f, f.full, map[string]any{"question": "How do I connect to the VPN?"})

	var fb mcpFeedbackOut
	structured(t, s.call("feedback", map[string]any{"messageId": msg, "rating": "down", "comment": "  should name the client app  "}, nil), &fb)
	if fb.MessageID != msg || fb.Rating != "down" || fb.Comment != "should name the client app" || fb.ID == "" || fb.ConversationID == "" {
		t.Fatalf("feedback %+v", fb)
	}
	if got := adminFeedback(t, f, f.kb, msg); len(got) != 1 || got[0].Rating != "down" || got[0].Comment != "should name the client app" {
		t.Fatalf("admin page: %+v", got)
	}
	// Again: the rating is replaced, not added.
	var again mcpFeedbackOut
	structured(t, s.call("feedback", map[string]any{"messageId": msg, "rating": "up"}, nil), &again)
	if again.ID != fb.ID || again.Rating != "up" {
		t.Fatalf("second rating %+v, first %+v", again, fb)
	}
	if got := adminFeedback(t, f, f.kb, msg); len(got) != 1 || got[0].Rating != "up" {
		t.Fatalf("admin page after the second rating: %+v", got)
	}
	// The HTTP route takes the same message id with the same key.
	key := &client{t: t, base: f.in.url, token: f.full}
	if r := key.do("POST", "/api/v1/messages/"+msg+"/feedback", map[string]any{"rating": "down", "comment": "over HTTP"}); r.Status != http.StatusOK {
		t.Fatalf("HTTP feedback with the key: %d %s", r.Status, r.Body)
	}
	if got := adminFeedback(t, f, f.kb, msg); len(got) != 1 || got[0].Comment != "over HTTP" {
		t.Fatalf("admin page after the HTTP rating: %+v", got)
	}

	// An answer the key cannot see: the owner's, from a knowledge base
	// outside the key's limit (asked with the unlimited key).
	hidden := mcpAnswer(t, f, f.unlimited, map[string]any{"question": "When are salaries paid?", "knowledgeBaseIds": []string{f.other}})
	toolRefused(t, s.call("feedback", map[string]any{"messageId": hidden, "rating": "down"}, nil), "not_found")
	if r := key.do("POST", "/api/v1/messages/"+hidden+"/feedback", map[string]any{"rating": "down"}); r.Status != http.StatusNotFound {
		t.Errorf("HTTP feedback on an answer outside the key: %d %s", r.Status, r.Body)
	}
	if got := adminFeedback(t, f, f.other, hidden); len(got) != 0 {
		t.Errorf("a refused rating was stored: %+v", got)
	}
	// The unlimited key sees it.
	structured(t, mustConnect(t, f.in, f.unlimited).call("feedback", map[string]any{"messageId": hidden, "rating": "down"}, nil), &fb)

	// Hostile and wrong input.
	toolRefused(t, s.call("feedback", map[string]any{"messageId": "999999999", "rating": "up"}, nil), "not_found")
	if res := s.call("feedback", map[string]any{"messageId": msg, "rating": "sideways"}, nil); !res.IsError {
		t.Errorf("a rating outside up/down was taken: %s", resultText(res))
	}
	if res := s.call("feedback", map[string]any{"messageId": "abc", "rating": "up"}, nil); !res.IsError {
		t.Errorf("a malformed message id was taken: %s", resultText(res))
	}
	toolRefused(t, s.call("feedback", map[string]any{"messageId": msg, "rating": "up", "comment": strings.Repeat("长", 2001)}, nil), "too_large")
	toolRefused(t, s.call("feedback", map[string]any{"messageId": msg, "rating": "up", "comment": "a\u0000b"}, nil), "invalid")
	var msgs struct{ Messages []struct{ ID, Role string } }
	f.admin.do("GET", "/api/v1/conversations/"+fb.ConversationID+"/messages", nil).json(t, &msgs)
	for _, m := range msgs.Messages {
		if m.Role == "user" {
			toolRefused(t, mustConnect(t, f.in, f.unlimited).call("feedback", map[string]any{"messageId": m.ID, "rating": "up"}, nil), "invalid")
		}
	}
	// Without the chat scope: refused, naming it.
	res := mustConnect(t, f.in, f.noChat).call("feedback", map[string]any{"messageId": msg, "rating": "up"}, nil)
	toolRefused(t, res, "forbidden")
	if !strings.Contains(resultText(res), "chat scope") {
		t.Errorf("refusal %q does not name the chat scope", resultText(res))
	}
}
