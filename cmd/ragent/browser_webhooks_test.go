package main

import (
	"fmt"
	"strings"
	"testing"
)

// A knowledge base's managers see its webhooks in the admin UI with who
// made each (a webhook sends only while its creator may read the knowledge
// base), and may delete one.
func TestBrowserWebhookList(t *testing.T) {
	_, api, b := startBrowser(t, testConfig(t))
	kb := api.createKB("hooked-kb")
	id := api.createWebhook(kb, "https://example.com/ragent-hook")

	adm := b.signedIn(t, "admin", false)
	adm.click(t, `[data-testid=nav-kb]`)
	adm.click(t, fmt.Sprintf(`[data-testid=kb-row][data-kb-id=%q] [data-testid=kb-webhooks]`, kb))
	adm.visible(t, `[data-testid=webhooks-dialog]`)
	row := fmt.Sprintf(`[data-testid=webhook-row][data-webhook-id=%q]`, id)
	adm.visible(t, row)
	if got := adm.text(t, row+` [data-testid=webhook-creator]`); got != "admin" {
		t.Fatalf("creator shown as %q, want admin", got)
	}
	if got := adm.text(t, row); !strings.Contains(got, "https://example.com/ragent-hook") {
		t.Fatalf("row %q does not show the URL", got)
	}
	adm.screenshot(t, "kb-webhooks")
	adm.click(t, row+` [data-testid=webhook-delete]`)
	adm.click(t, `[data-testid=confirm-ok]`)
	adm.poll(t, "the row gone", stepTimeout, fmt.Sprintf(`document.querySelectorAll(%s).length === 0`, quoteJS(row)))
	if l := api.webhooks(kb); len(l.Items) != 0 {
		t.Fatalf("after the delete: %+v", l.Items)
	}
}
