package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// An admin works the admin lists' row actions no other browser test
// reaches: a user is created, promoted, disabled, given a new password and
// deleted; a group renamed and deleted; a term mapping disabled and
// deleted; a document reindexed and deleted. Each change is checked on the
// server, not only on the page.
func TestBrowserAdminListActions(t *testing.T) {
	chromium := chromiumPath(t)
	in := start(t, testConfig(t))
	adminToken := in.login(t, "admin", "admin-password")
	api := in.client(t, adminToken)
	if r := api.do("POST", "/api/v1/groups", map[string]string{"name": "night-shift"}); r.Status != http.StatusCreated {
		t.Fatalf("create group: %d %s", r.Status, r.Body)
	}
	if r := api.do("POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": "k8s", "targetTerm": "kubernetes", "enabled": true}); r.Status != http.StatusCreated {
		t.Fatalf("create term mapping: %d %s", r.Status, r.Body)
	}
	kb := api.createKB("runbooks")
	doc := api.uploadAccepted(kb, "restart.md", []byte("# Restart\n\nRestart the service with systemctl restart ragent.\n"))
	api.waitReady(doc.ID)

	b := newBrowser(t, chromium, in.url)
	tb := b.tab(t, "admin", false)
	tb.open(t, "/")
	tb.login(t, "admin", "admin-password")
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	// user answers lena's record on the server, or nil once she is gone.
	user := func(t *testing.T) map[string]any {
		r := api.do("GET", "/api/v1/users", nil)
		var page struct{ Items []map[string]any }
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatalf("list users: %d %s", r.Status, r.Body)
		}
		for _, u := range page.Items {
			if u["username"] == "lena" {
				return u
			}
		}
		return nil
	}
	lena := `[data-testid=user-row][data-username=lena]`
	// saved waits for the info toast of a change made after clearToasts.
	clearToasts := func(t *testing.T) { tb.eval(t, `document.getElementById('toasts').replaceChildren()`) }
	saved := func(t *testing.T) { tb.visible(t, `[data-testid=toast][data-kind=info]`) }

	step("users", func(t *testing.T) {
		tb.open(t, "/#/admin/users")
		tb.sendKeys(t, `#user-username`, "lena")
		tb.sendKeys(t, `#user-password`, "lena-password")
		tb.click(t, `[data-testid=user-submit]`)
		tb.visible(t, lena)

		clearToasts(t)
		tb.eval(t, fmt.Sprintf(`(() => { const s = document.querySelector(%s); s.value = 'admin'; s.dispatchEvent(new Event('change')); })()`,
			quoteJS(lena+` [data-testid=user-role-select]`)))
		saved(t)
		if u := user(t); u["role"] != "admin" {
			t.Fatalf("after the role change: %v", u)
		}

		tb.click(t, lena+` [data-testid=user-disable]`)
		tb.visible(t, lena+`.row-disabled`)
		if u := user(t); u["disabled"] != true {
			t.Fatalf("after disabling: %v", u)
		}
		tb.click(t, lena+` [data-testid=user-disable]`)
		tb.poll(t, "the row to be enabled", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(lena+`.row-disabled`)))

		clearToasts(t)
		tb.click(t, lena+` [data-testid=user-password-reset]`)
		tb.sendKeys(t, `[data-testid=prompt-input]`, "lena-new-password")
		tb.click(t, `[data-testid=prompt-ok]`)
		saved(t)
		in.login(t, "lena", "lena-new-password")

		tb.click(t, lena+` [data-testid=user-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(lena)))
		if u := user(t); u != nil {
			t.Fatalf("deleted user still listed: %v", u)
		}
	})

	step("groups", func(t *testing.T) {
		tb.open(t, "/#/admin/groups")
		tb.click(t, `[data-testid=group-row][data-name=night-shift] [data-testid=group-rename]`)
		tb.fill(t, `[data-testid=prompt-input]`, "day-shift")
		tb.click(t, `[data-testid=prompt-ok]`)
		tb.visible(t, `[data-testid=group-row][data-name=day-shift]`)
		tb.click(t, `[data-testid=group-row][data-name=day-shift] [data-testid=group-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, `!document.querySelector('[data-testid=group-row]')`)
		if r := api.do("GET", "/api/v1/groups", nil); r.Status != http.StatusOK || string(r.Body) != `{"items":[],"nextCursor":null}` {
			t.Fatalf("groups after the delete: %d %s", r.Status, r.Body)
		}
	})

	step("term mappings", func(t *testing.T) {
		tb.open(t, "/#/admin/terms")
		row := `[data-testid=term-row][data-source=k8s]`
		tb.click(t, row+` [data-testid=term-toggle]`)
		tb.visible(t, row+`.row-disabled`)
		tb.click(t, row+` [data-testid=term-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(row)))
		if r := api.do("GET", "/api/v1/admin/term-mappings", nil); r.Status != http.StatusOK || string(r.Body) != `{"items":[],"nextCursor":null}` {
			t.Fatalf("term mappings after the delete: %d %s", r.Status, r.Body)
		}
	})

	step("documents", func(t *testing.T) {
		tb.open(t, "/#/admin/docs/"+kb)
		row := fmt.Sprintf(`[data-testid=doc-row][data-doc-id=%q]`, doc.ID)
		tb.visible(t, row+`[data-status=ready]`)
		clearToasts(t)
		tb.click(t, row+` [data-testid=doc-reindex]`)
		saved(t)
		tb.visible(t, row+`[data-status=ready]`) // reindexed, and the list followed it
		tb.click(t, row+` [data-testid=doc-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.poll(t, "the row to go", stepTimeout, fmt.Sprintf(`!document.querySelector(%s)`, quoteJS(row)))
		if r := api.do("GET", "/api/v1/documents/"+doc.ID, nil); r.Status != http.StatusNotFound {
			t.Fatalf("deleted document: %d %s", r.Status, r.Body)
		}
	})

	for _, m := range tb.unexpectedConsole() {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
