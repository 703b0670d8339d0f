package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// An admin opens the audit page, sees the newest events, narrows them with
// the filters and pages back with "load more".
func TestBrowserAuditLog(t *testing.T) {
	in, api, b := startBrowser(t, testConfig(t))
	// More group changes than one page holds (50), and one refused login.
	for i := 0; i < 55; i++ {
		if r := api.do("POST", "/api/v1/groups", map[string]string{"name": fmt.Sprintf("group-%02d", i)}); r.Status != http.StatusCreated {
			t.Fatalf("create group: %d %s", r.Status, r.Body)
		}
	}
	if r := in.client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": "mallory", "password": "guess-guess"}); r.Status != http.StatusUnauthorized {
		t.Fatalf("wrong login: %d", r.Status)
	}

	tb := b.signedIn(t, "admin", false)
	tb.click(t, `[data-testid=nav-audit]`)
	// Newest first: the browser's own login heads the list.
	tb.visible(t, `[data-testid=audit-row][data-action="auth.login"][data-result=success]`)
	tb.poll(t, "a first page of 50", stepTimeout, `document.querySelectorAll('[data-testid=audit-row]').length === 50`)
	tb.click(t, `[data-testid=audit-load-more]`)
	tb.poll(t, "the rest after load more", stepTimeout,
		`document.querySelectorAll('[data-testid=audit-row]').length > 50 && document.querySelector('[data-testid=audit-load-more]').hidden`)
	tb.screenshot(t, "audit-log")

	tb.eval(t, `document.querySelector('#audit-result').value = 'denied'`)
	tb.click(t, `[data-testid=audit-search]`)
	tb.poll(t, "only the refused login", stepTimeout,
		`document.querySelectorAll('[data-testid=audit-row]').length === 1 && document.querySelector('[data-testid=audit-row][data-result=denied][data-action="auth.login"]') !== null`)
	if got := tb.text(t, `[data-testid=audit-row]`); !strings.Contains(got, "mallory") {
		t.Errorf("denied login row %q does not name the username tried", got)
	}

	tb.click(t, `[data-testid=audit-reset]`)
	tb.poll(t, "the unfiltered list again", stepTimeout, `document.querySelectorAll('[data-testid=audit-row]').length === 50`)

	for _, m := range tb.unexpectedConsole() {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
