package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/internal/testenv"
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
	req := testenv.NewRequest(t, method, in.url+path+"?key="+key, body)
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

// TestWidgetRefusalCORS pins down what a page may read of a widget
// request's answer (docs/security.md, "The widget's refusals"): a refusal
// (401 for a bad or revoked key, 403 for an origin the key does not list)
// carries Access-Control-Allow-Origin for the requesting origin, so the
// widget can say why it cannot answer, but never
// Access-Control-Allow-Credentials, no other CORS grant, and a body that is
// the error's fixed code and message only; every other failure from such
// an origin (429 after too many bad keys) and an opaque origin get no CORS
// at all; a preflight from it is refused; answers go to listed origins only.
func TestWidgetRefusalCORS(t *testing.T) {
	in := start(t, testConfig(t))
	admin := in.login(t, "admin", "admin-password")
	kb := seedKnowledge(t, in, admin)
	keyID, key := createWidgetKey(t, in, admin, map[string]any{"name": "site", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin}})
	revokedID, revoked := createWidgetKey(t, in, admin, map[string]any{"name": "old site", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin}})
	if r := in.client(t, admin).do("DELETE", "/api/v1/api-keys/"+revokedID, nil); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	const evil = "http://evil.example"
	ask := map[string]any{"question": "How do I connect to the VPN?"}

	// An answer the test can tell a refusal from: a task of visitor A.
	r, events := widgetCall(t, in, "POST", "/api/v1/widget/chat", key, widgetOrigin, visitorA, ask)
	meta, ok := eventNamed(events, "meta")
	if r.Status != http.StatusOK || !ok {
		t.Fatalf("chat from the listed origin: %d %s %v", r.Status, r.Body, events)
	}
	if r.Header.Get("Access-Control-Allow-Origin") != widgetOrigin || r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("answer's CORS: %v", r.Header)
	}
	task := meta.json(t)["taskId"].(string)
	secrets := []string{kb, keyID, key, key[:10], revoked, task, widgetOrigin, "vpn", "VPN", "admin"}

	fixed := map[string]string{
		"forbidden":       "this widget key does not serve pages of this origin",
		"unauthenticated": "invalid, expired or revoked widget key",
	}
	refusal := func(t *testing.T, name string, r response, status int, origin string) {
		t.Helper()
		h := r.Header
		wantACAO := origin
		if origin == "null" {
			wantACAO = ""
		}
		if r.Status != status || h.Get("Access-Control-Allow-Origin") != wantACAO {
			t.Errorf("%s: %d ACAO %q, want %d ACAO %q: %s", name, r.Status, h.Get("Access-Control-Allow-Origin"), status, wantACAO, r.Body)
		}
		for _, hd := range []string{"Access-Control-Allow-Credentials", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods", "Access-Control-Expose-Headers", "Access-Control-Max-Age"} {
			if v := h.Get(hd); v != "" {
				t.Errorf("%s: %s: %q on a refusal", name, hd, v)
			}
		}
		if wantACAO != "" && !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
			t.Errorf("%s: a reflected origin without Vary: Origin (%v)", name, h.Values("Vary"))
		}
		// The body is {"error":{"code","message"}} with a fixed message:
		// nothing else, strictly.
		var body map[string]map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil || len(body) != 1 || len(body["error"]) != 2 {
			t.Fatalf("%s: body %s, want the error's code and message only", name, r.Body)
		}
		code, _ := body["error"]["code"].(string)
		if msg, _ := body["error"]["message"].(string); fixed[code] == "" || msg != fixed[code] {
			t.Errorf("%s: %s: %q %q, want a fixed refusal", name, r.Body, code, msg)
		}
		for _, s := range secrets {
			if strings.Contains(string(r.Body), s) {
				t.Errorf("%s: the refusal carries %q: %s", name, s, r.Body)
			}
		}
	}

	stop, taskEvents := "/api/v1/widget/chat/tasks/"+task+"/stop", "/api/v1/widget/chat/tasks/"+task+"/events"
	for _, c := range []struct {
		name, method, path, key, origin, visitor string
		body                                     any
		status                                   int
	}{
		{"chat from an unlisted origin", "POST", "/api/v1/widget/chat", key, evil, visitorA, ask, http.StatusForbidden},
		{"the widget's probe (no visitor, no body)", "POST", "/api/v1/widget/chat", key, evil, "", nil, http.StatusForbidden},
		{"same host, another port", "POST", "/api/v1/widget/chat", key, "http://allowed.example:8001", visitorA, ask, http.StatusForbidden},
		{"same host, https", "POST", "/api/v1/widget/chat", key, "https://allowed.example:8000", visitorA, ask, http.StatusForbidden},
		{"stop from an unlisted origin", "POST", stop, key, evil, visitorA, map[string]any{}, http.StatusForbidden},
		{"events from an unlisted origin", "GET", taskEvents, key, evil, visitorA, nil, http.StatusForbidden},
		{"a revoked key from its origin", "POST", "/api/v1/widget/chat", revoked, widgetOrigin, visitorA, ask, http.StatusUnauthorized},
		{"a revoked key from elsewhere", "POST", "/api/v1/widget/chat", revoked, evil, visitorA, ask, http.StatusUnauthorized},
		{"events with a revoked key", "GET", taskEvents, revoked, widgetOrigin, visitorA, nil, http.StatusUnauthorized},
		{"an unknown key", "POST", "/api/v1/widget/chat", "pk_" + strings.Repeat("x", 40), widgetOrigin, visitorA, ask, http.StatusUnauthorized},
		{"no key", "POST", "/api/v1/widget/chat", "", evil, visitorA, ask, http.StatusUnauthorized},
		{"an opaque origin", "POST", "/api/v1/widget/chat", key, "null", visitorA, ask, http.StatusForbidden},
		{"no origin", "POST", "/api/v1/widget/chat", key, "", visitorA, ask, http.StatusForbidden},
	} {
		r, events := widgetCall(t, in, c.method, c.path, c.key, c.origin, c.visitor, c.body)
		if len(events) > 0 {
			t.Errorf("%s: %d, events %v", c.name, r.Status, events)
			continue
		}
		if c.origin == "" { // no Origin: the message is about that, and nothing is reflected
			if r.Status != c.status || r.Header.Get("Access-Control-Allow-Origin") != "" || r.Header.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("%s: %d %v", c.name, r.Status, r.Header)
			}
			continue
		}
		refusal(t, c.name, r, c.status, c.origin)
	}

	// The admin's session, as a cookie and as a bearer token, changes
	// nothing: the widget's routes take the widget key only.
	req, _ := http.NewRequest("POST", in.url+"/api/v1/widget/chat?key="+key, strings.NewReader(`{"question":"vpn"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", evil)
	req.Header.Set(widgetVisitor, visitorA)
	req.Header.Set("Authorization", "Bearer "+admin)
	req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: admin})
	refusal(t, "with the admin's session", roundTrip(t, req), http.StatusForbidden, evil)

	// Still no preflight grant for the refused origin: it cannot send the
	// visitor header or a JSON body, so it never chats.
	pre, _ := http.NewRequest("OPTIONS", in.url+"/api/v1/widget/chat?key="+key, nil)
	pre.Header.Set("Origin", evil)
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "content-type,x-widget-visitor")
	if r := roundTrip(t, pre); r.Status != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" || r.Header.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("preflight from an unlisted origin: %d %v", r.Status, r.Header)
	}
	pre.Header.Set("Origin", widgetOrigin)
	if r := roundTrip(t, pre); r.Status != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != widgetOrigin || r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("preflight from the listed origin: %d %v", r.Status, r.Header)
	}

	// Other failures are not refusals of the page: after too many bad keys
	// from this address, the 429 carries no CORS, so a page cannot read it.
	var busy response
	for range 200 {
		r, _ := widgetCall(t, in, "POST", "/api/v1/widget/chat", "pk_guess-"+strings.Repeat("y", 30), evil, visitorA, ask)
		if r.Status == http.StatusTooManyRequests {
			busy = r
			break
		}
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("a guessed key: %d %s", r.Status, r.Body)
		}
	}
	if busy.Status != http.StatusTooManyRequests {
		t.Fatalf("200 guessed keys and no 429")
	}
	for _, hd := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials"} {
		if v := busy.Header.Get(hd); v != "" {
			t.Errorf("the 429 after guessed keys carries %s: %q", hd, v)
		}
	}
}
