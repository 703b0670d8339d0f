package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const (
	widgetOrigin  = "http://allowed.example:8000"
	visitorA      = "visitor-aaaaaaaaaaaaaaaa"
	visitorB      = "visitor-bbbbbbbbbbbbbbbb"
	widgetVisitor = "X-Widget-Visitor"
)

// createWidgetKey creates a widget key as admin and returns its id and key.
func createWidgetKey(t *testing.T, in *instance, admin string, body map[string]any) (id, key string) {
	t.Helper()
	r := in.client(t, admin).do("POST", "/api/v1/widget-keys", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create widget key %v: %d %s", body, r.Status, r.Body)
	}
	var k struct{ ID, Key, Kind string }
	r.json(t, &k)
	if !strings.HasPrefix(k.Key, "pk_") || k.Kind != "widget" {
		t.Fatalf("widget key %+v", k)
	}
	return k.ID, k.Key
}

// widgetCall sends a widget request: key in the query, Origin and visitor
// headers when not empty; the answer's events are parsed when it streams.
func widgetCall(t *testing.T, in *instance, method, path, key, origin, visitor string, body any) (response, []sseEvent) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case nil:
	case []byte:
		b = v
	default:
		b, _ = json.Marshal(v)
	}
	req, _ := http.NewRequestWithContext(context.Background(), method, in.url+path+"?key="+key, bytes.NewReader(b))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if visitor != "" {
		req.Header.Set(widgetVisitor, visitor)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := response{Status: resp.StatusCode, Header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return r, readEvents(resp.Body, nil)
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	r.Body = buf.Bytes()
	return r, nil
}

func eventNamed(events []sseEvent, name string) (sseEvent, bool) {
	for _, e := range events {
		if e.Name == name {
			return e, true
		}
	}
	return sseEvent{}, false
}

// TestWidgetKeyLimits checks what a widget key reaches: chat with its own
// knowledge bases from its origins, its visitor's tasks, and nothing else.
func TestWidgetKeyLimits(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	in.createUser(t, admin, "alice", "alice-password", "user")
	alice := in.login(t, "alice", "alice-password")
	kb := seedKnowledge(t, in, admin)
	other := in.client(t, admin).createKB("other-" + t.Name())

	// Only admins create widget keys, with origins and knowledge bases.
	body := map[string]any{"name": "site", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin + "/"}}
	if r := in.client(t, alice).do("POST", "/api/v1/widget-keys", body); r.Status != http.StatusForbidden {
		t.Fatalf("a user created a widget key: %d %s", r.Status, r.Body)
	}
	for _, bad := range []map[string]any{
		{"name": "x", "knowledgeBaseIds": []string{kb}},
		{"name": "x", "knowledgeBaseIds": []string{kb}, "origins": []string{"http://a.example/path"}},
		{"name": "x", "knowledgeBaseIds": []string{kb}, "origins": []string{"javascript:alert(1)"}},
		{"name": "x", "origins": []string{widgetOrigin}},
		{"name": "x", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin}, "visitorRate": -1},
	} {
		if r := in.client(t, admin).do("POST", "/api/v1/widget-keys", bad); r.Status != http.StatusBadRequest {
			t.Errorf("widget key %v: %d %s, want 400", bad, r.Status, r.Body)
		}
	}
	keyID, key := createWidgetKey(t, in, admin, body)

	ask := map[string]any{"question": "How do I connect to the VPN?"}
	t.Run("chat from an allowed origin streams with a citation", func(t *testing.T) {
		r, events := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorA, ask)
		if r.Status != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != widgetOrigin {
			t.Fatalf("chat: %d, ACAO %q: %s", r.Status, r.Header.Get("Access-Control-Allow-Origin"), r.Body)
		}
		src, ok := eventNamed(events, "sources")
		if !ok || !strings.Contains(src.Data, "vpn.md") {
			t.Fatalf("sources %q in %v", src.Data, events)
		}
		var answer strings.Builder
		for _, e := range events {
			if e.Name == "message" {
				answer.WriteString(e.json(t)["delta"].(string))
			}
		}
		if !strings.Contains(answer.String(), "[1]") {
			t.Errorf("answer without a citation: %q", answer.String())
		}
		fin, _ := eventNamed(events, "finish")
		if f := fin.json(t); f["status"] != "completed" || f["saved"] != false {
			t.Errorf("finish %v: want completed and not saved", f)
		}
	})

	t.Run("origins", func(t *testing.T) {
		// A refusal is readable by the refused page (the widget says why it
		// cannot answer), and it is nothing but the error: no answer, no
		// preflight grant. Without Origin, or from "null", not even that.
		for _, origin := range []string{"", "http://evil.example", "http://allowed.example:8001", "https://allowed.example:8000", "null"} {
			for _, visitor := range []string{visitorA, ""} { // "": the widget's probe names no visitor
				r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, origin, visitor, ask)
				wantACAO := origin
				if origin == "null" {
					wantACAO = ""
				}
				if r.Status != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != wantACAO ||
					r.Header.Get("Access-Control-Allow-Headers") != "" || !strings.Contains(string(r.Body), `"forbidden"`) {
					t.Errorf("origin %q visitor %q: %d ACAO %q: %s", origin, visitor, r.Status, r.Header.Get("Access-Control-Allow-Origin"), r.Body)
				}
			}
		}
		pre := func(origin string) response {
			req, _ := http.NewRequest("OPTIONS", in.url+"/api/v1/widget/chat?key="+key, nil)
			req.Header.Set("Origin", origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
			return roundTrip(t, req)
		}
		if r := pre(widgetOrigin); r.Status != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != widgetOrigin ||
			!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), widgetVisitor) {
			t.Errorf("preflight from the allowed origin: %d %v", r.Status, r.Header)
		}
		if r := pre("http://evil.example"); r.Status != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight from another origin: %d %v", r.Status, r.Header)
		}
	})

	t.Run("another knowledge base is refused", func(t *testing.T) {
		r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorA,
			map[string]any{"question": "vpn", "knowledgeBaseIds": []string{other}})
		if r.Status != http.StatusNotFound {
			t.Errorf("other knowledge base: %d %s", r.Status, r.Body)
		}
	})

	t.Run("other routes refuse the key", func(t *testing.T) {
		pk := in.client(t, key)
		for _, route := range [][2]string{
			{"GET", "/api/v1/knowledge-bases"}, {"GET", "/api/v1/knowledge-bases/" + kb + "/documents"},
			{"POST", "/api/v1/search"}, {"POST", "/api/v1/chat"}, {"GET", "/api/v1/conversations"},
			{"GET", "/api/v1/me"}, {"GET", "/api/v1/api-keys"}, {"GET", "/api/v1/usage"}, {"GET", "/api/v1/admin/audit"},
			{"POST", "/v1/chat/completions"}, {"POST", "/mcp"},
		} {
			r := pk.do(route[0], route[1], map[string]any{"query": "vpn", "question": "vpn"}, "Origin", widgetOrigin)
			if r.Status != http.StatusUnauthorized {
				t.Errorf("%s %s with a widget key: %d %s", route[0], route[1], r.Status, r.Body)
			}
		}
		// Not in the header of the widget's own routes either, as a session.
		r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", "rk_not-a-widget-key", widgetOrigin, visitorA, ask)
		if r.Status != http.StatusUnauthorized {
			t.Errorf("an API key on the widget route: %d %s", r.Status, r.Body)
		}
	})

	t.Run("hostile input", func(t *testing.T) {
		for _, v := range []string{"", "short", strings.Repeat("a", 65), "visitor-../../../etc", "visitor-aaaaaaaa:bbbbbbbb", "访客访客访客访客访客访客", "visitor-aaaaaaaa aaaaaaa"} {
			r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, v, ask)
			if r.Status != http.StatusBadRequest {
				t.Errorf("visitor %q: %d %s", v, r.Status, r.Body)
			}
		}
		r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorB, map[string]any{"question": strings.Repeat("问", 4001)})
		if r.Status != http.StatusBadRequest {
			t.Errorf("oversized question: %d %s", r.Status, r.Body)
		}
		r, _ = widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorB, []byte(`{"question":"`+strings.Repeat("x", 2<<20)+`"}`))
		if r.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("oversized body: %d %s", r.Status, r.Body)
		}
		history := make([]map[string]string, 21)
		for i := range history {
			history[i] = map[string]string{"role": "user", "content": "hi"}
		}
		r, _ = widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorB, map[string]any{"question": "vpn", "history": history})
		if r.Status != http.StatusBadRequest {
			t.Errorf("21 history messages: %d %s", r.Status, r.Body)
		}
		r, _ = widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorB, map[string]any{"question": "vpn", "conversationId": "1"})
		if r.Status != http.StatusBadRequest {
			t.Errorf("a conversation id: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a visitor's task is theirs", func(t *testing.T) {
		_, events := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorA, ask)
		meta, ok := eventNamed(events, "meta")
		if !ok {
			t.Fatalf("no meta in %v", events)
		}
		task := meta.json(t)["taskId"].(string)
		path := "/api/v1/widget/chat/tasks/" + task + "/events"
		if r, _ := widgetCall(t, in, "GET", path, key, widgetOrigin, visitorB, nil); r.Status != http.StatusNotFound {
			t.Errorf("another visitor read the events: %d %s", r.Status, r.Body)
		}
		if r, ev := widgetCall(t, in, "GET", path, key, widgetOrigin, visitorA, nil); r.Status != http.StatusOK || len(ev) == 0 || ev[len(ev)-1].Name != "done" {
			t.Errorf("the visitor's own events: %d %v", r.Status, ev)
		}
		// The key's owner, signed in, does not see visitors' turns either.
		if r := in.client(t, admin).do("GET", "/api/v1/chat/tasks/"+task+"/events", nil); r.Status != http.StatusNotFound {
			t.Errorf("the owner read a visitor's events: %d", r.Status)
		}
		if r := in.client(t, admin).do("GET", "/api/v1/conversations", nil); strings.Contains(string(r.Body), "VPN") {
			t.Errorf("a visitor's turn is in the owner's conversations: %s", r.Body)
		}
	})

	t.Run("revoked", func(t *testing.T) {
		if r := in.client(t, admin).do("DELETE", "/api/v1/api-keys/"+keyID, nil); r.Status != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		if r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorA, ask); r.Status != http.StatusUnauthorized {
			t.Errorf("revoked key: %d %s", r.Status, r.Body)
		}
	})
}

// TestWidgetRateLimits checks the per-visitor rate, then the per-origin
// rate that bounds a flood of fresh visitor ids.
func TestWidgetRateLimits(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	kb := seedKnowledge(t, in, admin)
	_, key := createWidgetKey(t, in, admin, map[string]any{"name": "rated", "knowledgeBaseIds": []string{kb},
		"origins": []string{widgetOrigin, "http://second.example"}, "visitorRate": 2, "originRate": 3})
	ask := map[string]any{"question": "vpn"}
	chat := func(origin, visitor string) response {
		r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, origin, visitor, ask)
		return r
	}
	for i := range 2 {
		if r := chat(widgetOrigin, visitorA); r.Status != http.StatusOK {
			t.Fatalf("chat %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := chat(widgetOrigin, visitorA); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("third chat of one visitor: %d %v %s", r.Status, r.Header, r.Body)
	}
	// The refused one spent none of the origin's: one more fits.
	if r := chat(widgetOrigin, visitorB); r.Status != http.StatusOK {
		t.Fatalf("another visitor: %d %s", r.Status, r.Body)
	}
	if r := chat(widgetOrigin, "visitor-cccccccccccccccc"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a fresh visitor past the origin's rate: %d %s", r.Status, r.Body)
	}
	// Another origin of the key has its own.
	if r := chat("http://second.example", "visitor-dddddddddddddddd"); r.Status != http.StatusOK {
		t.Fatalf("another origin: %d %s", r.Status, r.Body)
	}
}
