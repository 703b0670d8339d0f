package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The API keys page creates a key, shows it once in a dialog (the key
// works; the list then shows only its prefix) and revokes it after a
// confirmation; an admin's page lists other users' keys with the owner.
func TestBrowserAPIKeys(t *testing.T) {
	in, api, b := startBrowser(t, testConfig(t), "hana")
	kb := api.createKB("hana-kb")
	api.do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": "user", "name": "hana", "role": "viewer"})

	tb := b.tab(t, "hana", false)
	step := steps(t)
	var key string
	step("create and copy once", func(t *testing.T) {
		tb.open(t, "/")
		tb.login(t, "hana", "hana-password")
		tb.click(t, `[data-testid=nav-apikeys]`)
		tb.visible(t, `[data-testid=apikey-form]`)
		tb.visible(t, `[data-testid=apikey-kb][data-kb-id="`+kb+`"]`)
		tb.sendKeys(t, `#apikey-name`, "ingest bot")
		tb.click(t, `[data-testid=apikey-kb][data-kb-id="`+kb+`"]`)
		tb.click(t, `[data-testid=apikey-submit]`)
		tb.visible(t, `[data-testid=apikey-dialog]`)
		tb.screenshot(t, "apikey-created")
		ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#apikey-value').value`))
		if err != nil || !strings.HasPrefix(v, "rk_") {
			t.Fatalf("key in the dialog %q, %v", v, err)
		}
		key = v
		r := in.client(t, key).do("POST", "/api/v1/search", map[string]any{"query": "anything"})
		if r.Status != http.StatusOK {
			t.Fatalf("the shown key: %d %s", r.Status, r.Body)
		}
		tb.click(t, `[data-testid=apikey-dialog-close]`)
		tb.poll(t, "the dialog to close", stepTimeout, `!document.querySelector('[data-testid=apikey-dialog]')`)
		tb.visible(t, `[data-testid=apikey-row][data-name="ingest bot"]`)
		if row := tb.text(t, `[data-testid=apikey-row]`); strings.Contains(row, key[10:]) || !strings.Contains(row, key[:10]) || !strings.Contains(row, "hana-kb") {
			t.Fatalf("row %q: want the prefix and the knowledge base, never the key", row)
		}
	})

	step("admin sees it with its owner", func(t *testing.T) {
		ta := b.signedIn(t, "admin", true)
		ta.open(t, "/#/api-keys")
		ta.visible(t, `[data-testid=apikey-row][data-name="ingest bot"]`)
		if row := ta.text(t, `[data-testid=apikey-row]`); !strings.Contains(row, "hana") {
			t.Fatalf("admin's row %q lacks the owner", row)
		}
	})

	step("revoke", func(t *testing.T) {
		tb.click(t, `[data-testid=apikey-revoke]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, `!document.querySelector('[data-testid=apikey-row]')`)
		if r := in.client(t, key).do("POST", "/api/v1/search", map[string]any{"query": "anything"}); r.Status != http.StatusUnauthorized {
			t.Fatalf("revoked key: %d %s", r.Status, r.Body)
		}
	})

	for _, m := range tb.unexpectedConsole() {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
