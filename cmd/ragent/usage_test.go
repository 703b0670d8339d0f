package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

type usageRowJSON struct {
	Day, UserID, Username, GroupID, GroupName, KeyID, KeyName, KnowledgeBaseID, Model, Kind string
	Calls, Requests, PromptTokens, CompletionTokens, TotalTokens, EstimatedTokens           int64
}

// flushUsage writes every instance's buffered usage, as a shutdown would.
func flushUsage(t testing.TB, ins ...*instance) {
	t.Helper()
	for _, in := range ins {
		if err := in.app.meter.Flush(context.Background()); err != nil {
			t.Fatalf("flush usage: %v", err)
		}
	}
}

func usageRows(t testing.TB, c *client, query string) []usageRowJSON {
	t.Helper()
	return getItems[usageRowJSON](c.forTest(t), "/api/v1/usage?"+query)
}

func byKind(rows []usageRowJSON) map[string]usageRowJSON {
	m := map[string]usageRowJSON{}
	for _, r := range rows {
		m[r.Kind] = r
	}
	return m
}

// TestUsageRecordedAcrossInstances: a chat on one instance and an upload on
// another are recorded per user, kind, model and knowledge base — the
// chat's tokens as the provider reported them, the embeddings estimated —
// each call once even when a flush is replayed, and GET /usage shows a
// user their own usage only.
func TestUsageRecordedAcrossInstances(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	a, b := start(t, cfg), start(t, cfg)
	adminToken := a.login(t, "admin", "admin-password")
	admin := a.client(t, adminToken)
	kb := seedKnowledge(t, b, adminToken) // embeddings on b's worker (or a's)
	bobID := a.createUser(t, adminToken, "bob", "bob-password-1", "user")
	admin.makeInternal(kb)
	bob := b.client(t, b.login(t, "bob", "bob-password-1"))

	status, events := bob.chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?", "knowledgeBaseIds": []string{kb}}, nil)
	if status != http.StatusOK || !strings.HasSuffix(collapse(events), "finish done") {
		t.Fatalf("chat: %d %s", status, collapse(events))
	}
	// Counted by the instance that ran the chat, once it wrote the records.
	flushUsage(t, b)
	if m := b.client(t, adminToken).do("GET", "/metrics", nil); !strings.Contains(string(m.Body), `ragent_llm_tokens_total{estimated="false",kind="answer",type="prompt"} 10`) {
		t.Errorf("metrics lack the answer's tokens")
	}
	// A second chat, written only by b's shutdown.
	status, events = bob.chatStream(context.Background(), map[string]any{"question": "And on a phone?", "conversationId": events[0].json(t)["conversationId"], "knowledgeBaseIds": []string{kb}}, nil)
	if status != http.StatusOK || !strings.HasSuffix(collapse(events), "finish done") {
		t.Fatalf("second chat: %d %s", status, collapse(events))
	}
	// b's records reach Postgres on shutdown (its last flush, before the
	// database closes): nothing is lost on a restart. Its metrics count
	// what it wrote.
	flushUsage(t, a)
	b.stop()
	if m := a.client(t, adminToken).do("GET", "/metrics", nil); m.Status != http.StatusOK {
		t.Fatalf("metrics: %d", m.Status)
	}
	bob = a.client(t, a.login(t, "bob", "bob-password-1"))

	mine := byKind(usageRows(t, bob, "groupBy=kind,model,knowledgeBase"))
	answer := mine["answer"]
	if answer.Model != "test-model" || answer.PromptTokens != 20 || answer.CompletionTokens == 0 || answer.EstimatedTokens != 0 || answer.Calls != 2 || answer.KnowledgeBaseID != kb {
		t.Fatalf("answer usage %+v (all: %+v)", answer, mine)
	}
	if title := mine["title"]; title.Model != "test-fast" || title.PromptTokens != 10 || title.Calls != 1 {
		t.Fatalf("title usage %+v", title)
	}
	if rw := mine["rewrite"]; rw.Model != "test-fast" || rw.Calls != 1 {
		t.Fatalf("rewrite usage %+v", rw)
	}
	if q := mine["embedding"]; q.Calls != 2 || q.TotalTokens == 0 || q.EstimatedTokens != q.TotalTokens {
		t.Fatalf("question embedding %+v", q)
	}
	if req := mine["request"]; req.Requests != 2 || req.TotalTokens != 0 {
		t.Fatalf("requests %+v", req)
	}
	// The upload's embeddings are the admin's, in the knowledge base.
	all := usageRows(t, admin, "all=true&groupBy=user,kind,knowledgeBase")
	var ingest *usageRowJSON
	for i, r := range all {
		if r.Kind == "embedding" && r.Username == "admin" {
			ingest = &all[i]
		}
		if r.UserID != bobID && r.Username == "bob" {
			t.Fatalf("bob's row has id %s, want %s", r.UserID, bobID)
		}
	}
	if ingest == nil || ingest.KnowledgeBaseID != kb || ingest.TotalTokens == 0 || ingest.EstimatedTokens != ingest.TotalTokens {
		t.Fatalf("ingestion embeddings %+v in %+v", ingest, all)
	}

	// A flush replayed (the same call ids) adds nothing.
	before := byKind(usageRows(t, bob, "groupBy=kind"))["answer"]
	replay := []service.UsageRecord{{CallID: "replayed", At: time.Now(), UserID: mustID(t, bobID), Kind: service.UsageAnswer, Model: "test-model", PromptTokens: 5}}
	for range 2 {
		if _, err := a.app.store.SaveUsage(context.Background(), replay); err != nil {
			t.Fatal(err)
		}
	}
	if after := byKind(usageRows(t, bob, "groupBy=kind"))["answer"]; after.PromptTokens != before.PromptTokens+5 || after.Calls != before.Calls+1 {
		t.Fatalf("replayed flush: before %+v after %+v", before, after)
	}

	// By day: today's row.
	today := time.Now().UTC().Format(time.DateOnly)
	if days := usageRows(t, bob, "groupBy=day&from="+today+"&to="+today); len(days) != 1 || days[0].Day != today {
		t.Fatalf("by day %+v", days)
	}
	for _, q := range []string{"from=2026-13-01", "from=2026-02-01&to=2026-01-01", "groupBy=colour", "from=2020-01-01&to=2026-01-01", "limit=0", "all=maybe"} {
		if r := bob.do("GET", "/api/v1/usage?"+q, nil); r.Status != http.StatusBadRequest {
			t.Errorf("usage?%s: %d %s", q, r.Status, r.Body)
		}
	}
	for _, q := range []string{"all=true", "userId=" + fmt.Sprint(1)} {
		if r := bob.do("GET", "/api/v1/usage?"+q, nil); r.Status != http.StatusForbidden {
			t.Errorf("bob usage?%s: %d %s", q, r.Status, r.Body)
		}
	}
}

func putQuota(t testing.TB, c *client, q map[string]any) {
	t.Helper()
	if r := c.do("PUT", "/api/v1/admin/quotas", q); r.Status != http.StatusOK {
		t.Fatalf("put quota %v: %d %s", q, r.Status, r.Body)
	}
}

// refusedForQuota checks a 429 quota_exceeded: its quota in the details and
// a Retry-After until the quota's period ends.
func refusedForQuota(t testing.TB, r response, subject, metric string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("status %d %s, want 429", r.Status, r.Body)
	}
	var e struct {
		Error struct {
			Code    string
			Details map[string]string
		}
	}
	r.json(t, &e)
	if e.Error.Code != "quota_exceeded" || e.Error.Details["subject"] != subject || e.Error.Details["metric"] != metric {
		t.Fatalf("refusal %s", r.Body)
	}
	resets, err := time.Parse(time.RFC3339, e.Error.Details["resetsAt"])
	if err != nil {
		t.Fatalf("resetsAt %q", e.Error.Details["resetsAt"])
	}
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || retry < 1 || time.Duration(retry)*time.Second > time.Until(resets)+2*time.Second {
		t.Fatalf("Retry-After %q for a quota resetting at %s", r.Header.Get("Retry-After"), resets)
	}
}

// TestQuotasAcrossInstances: quotas set on one instance hold on another at
// once — a user's requests, a group's tokens shared by its members, an API
// key's requests on the OpenAI-compatible API — a refused chat writes
// nothing, the answer that crossed a quota was not cut, and every change
// is audited.
func TestQuotasAcrossInstances(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	a, b := start(t, cfg), start(t, cfg)
	adminToken := a.login(t, "admin", "admin-password")
	admin := a.client(t, adminToken)
	kb := seedKnowledge(t, a, adminToken)
	admin.makeInternal(kb)
	bobID := a.createUser(t, adminToken, "bob", "bob-password-1", "user")
	carolID := a.createUser(t, adminToken, "carol", "carol-password-1", "user")
	bobA := a.client(t, a.login(t, "bob", "bob-password-1"))
	bobB := b.client(t, b.login(t, "bob", "bob-password-1"))
	carol := b.client(t, b.login(t, "carol", "carol-password-1"))
	search := map[string]any{"query": "VPN", "knowledgeBaseIds": []string{kb}}

	t.Run("validation", func(t *testing.T) {
		for _, q := range []map[string]any{
			{"subject": "team", "subjectId": bobID, "dailyRequests": 1},
			{"subject": "user", "subjectId": bobID, "dailyRequests": -1},
			{"subject": "user", "subjectId": "0", "dailyRequests": 1},
			{"subject": "user", "subjectId": bobID, "monthlyTokens": service.MaxQuota + 1},
		} {
			if r := admin.do("PUT", "/api/v1/admin/quotas", q); r.Status != http.StatusBadRequest {
				t.Errorf("%v: %d %s", q, r.Status, r.Body)
			}
		}
		if r := admin.do("PUT", "/api/v1/admin/quotas", map[string]any{"subject": "group", "subjectId": "12345", "dailyTokens": 1}); r.Status != http.StatusNotFound {
			t.Errorf("unknown group: %d %s", r.Status, r.Body)
		}
		if r := bobA.do("PUT", "/api/v1/admin/quotas", map[string]any{"subject": "user", "subjectId": bobID, "dailyRequests": 100}); r.Status != http.StatusForbidden {
			t.Errorf("a user setting a quota: %d %s", r.Status, r.Body)
		}
	})

	t.Run("user requests", func(t *testing.T) {
		putQuota(t, admin, map[string]any{"subject": "user", "subjectId": bobID, "dailyRequests": 2})
		for _, c := range []*client{bobB, bobA} { // counted across instances
			if r := c.forTest(t).do("POST", "/api/v1/search", search); r.Status != http.StatusOK {
				t.Fatalf("search within quota: %d %s", r.Status, r.Body)
			}
		}
		refusedForQuota(t, bobB.forTest(t).do("POST", "/api/v1/search", search), "user", "requests")
		// A refused chat writes nothing.
		db := connectDB(t, cfg.DatabaseURL)
		count := func() int { return countRows(t, db, `SELECT count(*) FROM messages`) }
		before := count()
		refusedForQuota(t, bobA.forTest(t).do("POST", "/api/v1/chat", map[string]any{"question": "VPN?"}), "user", "requests")
		if after := count(); after != before {
			t.Fatalf("a refused chat wrote %d messages", after-before)
		}
		if r := carol.forTest(t).do("POST", "/api/v1/search", search); r.Status != http.StatusOK {
			t.Fatalf("another user: %d %s", r.Status, r.Body)
		}
		// Removed on one instance, gone on the other at once.
		if r := admin.do("DELETE", "/api/v1/admin/quotas/user/"+bobID, nil); r.Status != http.StatusNoContent {
			t.Fatalf("delete quota: %d %s", r.Status, r.Body)
		}
		if r := bobB.forTest(t).do("POST", "/api/v1/search", search); r.Status != http.StatusOK {
			t.Fatalf("search after the quota is removed: %d %s", r.Status, r.Body)
		}
	})

	t.Run("group tokens", func(t *testing.T) {
		r := admin.do("POST", "/api/v1/groups", map[string]any{"name": "team"})
		var g struct{ ID string }
		r.json(t, &g)
		for _, u := range []string{bobID, carolID} {
			if r := admin.do("POST", "/api/v1/groups/"+g.ID+"/members", map[string]any{"userId": u}); r.Status != http.StatusCreated {
				t.Fatalf("add member: %d %s", r.Status, r.Body)
			}
		}
		// The group has spent nothing yet (usage before the quota counts:
		// the counter is seeded from Postgres), so one chat is admitted.
		flushUsage(t, a, b)
		spent := int64(0)
		for _, row := range usageRows(t, admin, "all=true&groupBy=group") {
			if row.GroupID == g.ID {
				spent = row.TotalTokens
			}
		}
		putQuota(t, admin, map[string]any{"subject": "group", "subjectId": g.ID, "monthlyTokens": spent + 1})
		status, events := carol.forTest(t).chatStream(context.Background(), map[string]any{"question": "How do I connect to the VPN?", "knowledgeBaseIds": []string{kb}}, nil)
		// The answer that crosses the quota is not cut.
		if status != http.StatusOK || !strings.Contains(collapse(events), "message finish done") || events[len(events)-2].json(t)["status"] != "completed" {
			t.Fatalf("chat crossing the quota: %d %s", status, collapse(events))
		}
		flushUsage(t, a, b)
		// Shared: bob, on the other instance, is refused for carol's tokens.
		refusedForQuota(t, bobA.forTest(t).do("POST", "/api/v1/chat", map[string]any{"question": "VPN?"}), "group", "tokens")
		refusedForQuota(t, carol.forTest(t).do("POST", "/api/v1/search", search), "group", "tokens")
	})

	t.Run("api key requests", func(t *testing.T) {
		dave := a.createUser(t, adminToken, "dave", "dave-password-1", "user")
		daveC := a.client(t, a.login(t, "dave", "dave-password-1"))
		k := createKey(t, daveC, map[string]any{"name": "bot", "scopes": []string{"chat"}})
		putQuota(t, admin, map[string]any{"subject": "key", "subjectId": k.ID, "dailyRequests": 1})
		bot := b.client(t, k.Key)
		body := map[string]any{"model": "ragent", "messages": userMsg("How do I connect to the VPN?"), "stream": true}
		if s := bot.completions(context.Background(), body, nil); s.Status != http.StatusOK || !s.Done {
			t.Fatalf("first completion: %d %s", s.Status, s.Body)
		}
		s := a.client(t, k.Key).completions(context.Background(), body, nil)
		if s.Status != http.StatusTooManyRequests || oaiError(t, response{Status: s.Status, Body: s.Body}).Code != "quota_exceeded" || s.Header.Get("Retry-After") == "" {
			t.Fatalf("second completion: %d %s", s.Status, s.Body)
		}
		// The key's owner, signed in, is not limited by the key's quota.
		if r := daveC.do("POST", "/api/v1/search", search); r.Status == http.StatusTooManyRequests {
			t.Fatalf("the owner's session refused for the key's quota: %s (user %s)", r.Body, dave)
		}
	})

	// Every change is audited; refusals are counted.
	r := admin.do("GET", "/api/v1/admin/audit?action=quota.put", nil)
	var audit struct {
		Items []struct{ Result, TargetID string }
	}
	r.json(t, &audit)
	results := map[string]int{}
	for _, e := range audit.Items {
		results[e.Result]++
	}
	// (Refusals of one kind by one admin coalesce into one row a window.)
	if results["success"] < 3 || results["invalid"] < 1 || results["not_found"] < 1 || results["denied"] < 1 {
		t.Errorf("quota.put audit results %v", results)
	}
	r = admin.do("GET", "/api/v1/admin/audit?action=quota.delete", nil)
	r.json(t, &audit)
	if len(audit.Items) != 1 || audit.Items[0].TargetID != "user:"+bobID {
		t.Errorf("quota.delete audit %s", r.Body)
	}
	metrics := string(b.client(t, adminToken).do("GET", "/metrics", nil).Body)
	if !strings.Contains(metrics, `ragent_quota_refusals_total{metric="requests",subject="user"}`) ||
		!strings.Contains(metrics, `ragent_quota_refusals_total{metric="tokens",subject="group"}`) {
		t.Errorf("refusal metrics missing")
	}
}
