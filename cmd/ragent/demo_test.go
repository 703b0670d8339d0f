package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The first start loads the demo once (a second instance adds nothing), its
// documents are ingested, and a jargon question is rewritten by the term
// mappings and answered from the right document.
func TestDemoDataOnFirstStart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Demo = true
	a := start(t, cfg)
	start(t, cfg) // a second instance finds the demo loaded
	admin := a.login(t, "admin", "admin-password")
	c := a.client(t, admin)

	var kbs struct{ Items []struct{ ID, Name string } }
	c.do("GET", "/api/v1/knowledge-bases", nil).json(t, &kbs)
	if len(kbs.Items) != 1 {
		t.Fatalf("%d knowledge bases after two starts, want 1 demo", len(kbs.Items))
	}
	var docs struct{ Items []struct{ ID, Name string } }
	c.do("GET", "/api/v1/knowledge-bases/"+kbs.Items[0].ID+"/documents", nil).json(t, &docs)
	if len(docs.Items) != 3 {
		t.Fatalf("demo documents: %+v", docs.Items)
	}
	for _, d := range docs.Items {
		c.waitReady(d.ID)
	}
	if r := c.do("GET", "/api/v1/admin/intents", nil); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"it.logs"`) {
		t.Fatalf("demo intents: %d %s", r.Status, r.Body)
	}
	if r := c.do("GET", "/api/v1/admin/term-mappings", nil); !strings.Contains(string(r.Body), "那个打日志的") {
		t.Fatalf("demo term mappings: %s", r.Body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, events := c.chatStream(ctx, map[string]any{"question": "那个打日志的日志保留多久？"}, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("sequence %q", got)
	}
	srcs := events[1].json(t)["sources"].([]any)
	if len(srcs) == 0 || srcs[0].(map[string]any)["documentName"] != "sls-faq.md" {
		t.Fatalf("top source for a log-service question: %v", srcs)
	}
	var answer strings.Builder
	for _, e := range events {
		if e.Name == "message" {
			answer.WriteString(e.json(t)["delta"].(string))
		}
	}
	if !strings.Contains(answer.String(), "30 天") || !strings.Contains(answer.String(), "[1]") {
		t.Fatalf("offline answer does not quote the retention with a citation: %q", answer.String())
	}
}
