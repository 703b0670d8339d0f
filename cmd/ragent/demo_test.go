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

	var kbs struct {
		Items []struct{ ID, Name, Visibility string }
	}
	c.do("GET", "/api/v1/knowledge-bases", nil).json(t, &kbs)
	if len(kbs.Items) != 2 || kbs.Items[0].Visibility != "internal" || kbs.Items[1].Visibility != "private" {
		t.Fatalf("knowledge bases after two starts: %+v, want the internal and the private demo", kbs.Items)
	}
	for i, want := range []int{3, 1} {
		var docs struct{ Items []struct{ ID, Name string } }
		c.do("GET", "/api/v1/knowledge-bases/"+kbs.Items[i].ID+"/documents", nil).json(t, &docs)
		if len(docs.Items) != want {
			t.Fatalf("demo documents of %s: %+v", kbs.Items[i].Name, docs.Items)
		}
		for _, d := range docs.Items {
			c.waitReady(d.ID)
		}
	}
	// A plain user reads the internal demo only.
	a.createUser(t, admin, "dora", "dora-password", "user")
	var userKBs struct{ Items []struct{ ID string } }
	a.client(t, a.login(t, "dora", "dora-password")).do("GET", "/api/v1/knowledge-bases", nil).json(t, &userKBs)
	if len(userKBs.Items) != 1 || userKBs.Items[0].ID != kbs.Items[0].ID {
		t.Fatalf("a plain user lists %+v, want only the internal demo %s", userKBs.Items, kbs.Items[0].ID)
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
