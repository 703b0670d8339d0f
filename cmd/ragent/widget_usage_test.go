package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// widgetStream sends a widget chat from the listed origin as visitor and
// reads its events, calling onEvent for each (false stops reading).
func widgetStream(t *testing.T, in *instance, key, visitor, question string, onEvent func(sseEvent) bool) (int, []sseEvent) {
	t.Helper()
	req := jsonRequest(context.Background(), in.url+"/api/v1/widget/chat?key="+key, map[string]any{"question": question},
		"Origin", widgetOrigin, widgetVisitor, visitor)
	return refusedAsEvent(streamRequest(t, req, onEvent))
}

// TestWidgetUsageRecordedPerKey: a widget's chats are recorded against its
// key (and its owner), apart from the owner's own chats and from another
// widget key's, whichever visitor asked: GET /api/v1/usage grouped by key
// shows each key's calls and requests.
func TestWidgetUsageRecordedPerKey(t *testing.T) {
	llm := newFakeLLM(t)
	in := start(t, chatConfig(t, llm))
	adminToken := in.login(t, "admin", "admin-password")
	admin := in.client(t, adminToken)
	kb := seedKnowledge(t, in, adminToken)
	siteID, site := createWidgetKey(t, in, adminToken, map[string]any{"name": "site", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin}})
	otherID, other := createWidgetKey(t, in, adminToken, map[string]any{"name": "other site", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin}})

	chat := func(key, visitor, q string) {
		t.Helper()
		if status, events := widgetStream(t, in, key, visitor, q, nil); status != http.StatusOK || !strings.HasSuffix(collapse(events), "finish done") {
			t.Fatalf("widget chat %q: %d %s", q, status, collapse(events))
		}
	}
	chat(site, visitorA, "How do I connect to the VPN?")
	chat(site, visitorA, "And the VPN on a phone?")
	chat(site, visitorB, "Where is the VPN client?")
	chat(other, visitorA, "VPN?")
	if status, events := admin.chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?"}, nil); status != http.StatusOK || !strings.HasSuffix(collapse(events), "finish done") {
		t.Fatalf("the owner's chat: %d %s", status, collapse(events))
	}
	flushUsage(t, in)

	type tally struct{ answers, requests int64 }
	byKey := map[string]tally{}
	for _, r := range usageRows(t, admin, "all=true&groupBy=user,key,kind") {
		if r.Username != "admin" {
			t.Errorf("a row not the owner's: %+v", r)
		}
		k := byKey[r.KeyID]
		switch r.Kind {
		case "answer":
			k.answers += r.Calls
			if r.TotalTokens == 0 {
				t.Errorf("answer row without tokens: %+v", r)
			}
		case "request":
			k.requests += r.Requests
		}
		byKey[r.KeyID] = k
		if r.KeyID == siteID && r.KeyName != "site" || r.KeyID == otherID && r.KeyName != "other site" {
			t.Errorf("row %+v: the key's name", r)
		}
	}
	for _, c := range []struct {
		key  string
		want tally
	}{{siteID, tally{3, 3}}, {otherID, tally{1, 1}}, {"", tally{1, 1}}} {
		if got := byKey[c.key]; got != c.want {
			t.Errorf("key %q: %d answers, %d requests; want %d, %d (all: %+v)", c.key, got.answers, got.requests, c.want.answers, c.want.requests, byKey)
		}
	}
	// Grouped by key alone, as the usage page's top keys are.
	keys := map[string]usageRowJSON{}
	for _, r := range usageRows(t, admin, "all=true&groupBy=key") {
		keys[r.KeyID] = r
	}
	if r := keys[siteID]; len(keys) != 3 || r.KeyName != "site" || r.Requests != 3 || r.TotalTokens == 0 || r.TotalTokens <= keys[otherID].TotalTokens {
		t.Errorf("usage by key: %+v", keys)
	}
}

// TestWidgetVisitorsFairQueue runs two instances with N = 2: one visitor of
// a widget key opens four answers (two run, two wait), then another visitor
// of the same key asks once. Each visitor is a user of their own in the
// fair queue: the second is placed ahead of the first's waiting answers
// and gets the first slot that frees, as a second signed-in user would.
func TestWidgetVisitorsFairQueue(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 2, 5, 60*time.Second
	ins := []*instance{start(t, cfg), start(t, cfg)}
	admin := ins[0].login(t, "admin", "admin-password")
	kb := seedKnowledge(t, ins[0], admin)
	_, key := createWidgetKey(t, ins[0], admin, map[string]any{"name": "site", "knowledgeBaseIds": []string{kb}, "origins": []string{widgetOrigin}})

	var wg sync.WaitGroup
	ask := func(in *instance, visitor, q string) int {
		return askHeld(t, &wg, llm, q, func(onEvent func(sseEvent) bool) []sseEvent {
			_, events := widgetStream(t, in, key, visitor, q, onEvent)
			return events
		})
	}
	// The first visitor is the heavy user, the second the light one.
	queueHeavyThenLight(t, 4,
		func(i int, q string) int { return ask(ins[i%2], visitorA, q) },
		func(q string) int { return ask(ins[1], visitorB, q) })
	checkAdmissions(t, &wg, llm, 2, []admission{
		{heavyQ(0), lightQ},
		{heavyQ(1), heavyQ(2)},
		{lightQ, heavyQ(3)},
	}, heavyQ(2), heavyQ(3))
}
