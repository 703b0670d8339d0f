package main

import (
	"net/http"
	"strings"
	"testing"
)

// The account dialog changes the signed-in user's password (ending their
// other sessions, keeping this one) and signs them out everywhere.
func TestBrowserAccount(t *testing.T) {
	in, _, b := startBrowser(t, testConfig(t), "gina")
	otherDevice := in.login(t, "gina", "gina-password")

	tb := b.tab(t, "gina", false)
	me := func(t *testing.T, cookie *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest("GET", in.url+"/api/v1/me", nil)
		req.AddCookie(cookie)
		return roundTrip(t, req).Status
	}
	step := steps(t)

	step("login", func(t *testing.T) {
		tb.open(t, "/")
		tb.login(t, "gina", "gina-password")
	})

	step("wrong current password", func(t *testing.T) {
		tb.click(t, `[data-testid=account-button]`)
		tb.visible(t, `[data-testid=account-dialog]`)
		tb.sendKeys(t, `#account-old-password`, "not-ginas")
		tb.sendKeys(t, `#account-new-password`, "gina-new-password")
		tb.sendKeys(t, `#account-confirm-password`, "gina-new-password")
		tb.click(t, `[data-testid=account-password-submit]`)
		tb.visible(t, `[data-testid=account-error]`)
		if got := tb.text(t, `[data-testid=account-error]`); !strings.Contains(got, "当前密码不正确") && !strings.Contains(got, "current password is incorrect") {
			t.Fatalf("error %q, want the wrong-current-password message", got)
		}
		tb.screenshot(t, "account-dialog")
		// The session is fine: the page did not fall back to the login form.
		if n := tb.count(t, `[data-testid=login-form]`); n != 0 {
			t.Fatalf("a wrong current password signed the user out")
		}
	})

	step("change password", func(t *testing.T) {
		before := tb.sessionCookie(t)
		tb.fill(t, `#account-old-password`, "gina-password")
		tb.click(t, `[data-testid=account-password-submit]`)
		tb.poll(t, "the dialog to close", stepTimeout, `!document.querySelector('[data-testid=account-dialog]')`)
		tb.visible(t, `[data-testid=toast][data-kind=info]`)
		tb.screenshot(t, "account-password-changed")
		after := tb.sessionCookie(t)
		if after.Value == before.Value {
			t.Fatal("the session cookie was not replaced")
		}
		if s := me(t, after); s != http.StatusOK {
			t.Fatalf("this browser's new session: %d, want 200", s)
		}
		if s := me(t, before); s != http.StatusUnauthorized {
			t.Fatalf("this browser's old session: %d, want 401", s)
		}
		if r := in.client(t, otherDevice).do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("another device's session: %d, want 401", r.Status)
		}
	})

	step("sign out everywhere", func(t *testing.T) {
		elsewhere := in.login(t, "gina", "gina-new-password")
		cookie := tb.sessionCookie(t)
		tb.click(t, `[data-testid=account-button]`)
		tb.click(t, `[data-testid=account-logout-all]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.visible(t, `[data-testid=login-form]`)
		if s := me(t, cookie); s != http.StatusUnauthorized {
			t.Fatalf("this browser's session after signing out everywhere: %d, want 401", s)
		}
		if r := in.client(t, elsewhere).do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("another device's session after signing out everywhere: %d, want 401", r.Status)
		}
	})

	// The refused change's 400 is the only console error the page may log.
	for _, m := range tb.unexpectedConsole() {
		if m.Source == "network" && m.URL == in.url+"/api/v1/me/password" && strings.Contains(m.Text, "status of 400") {
			continue
		}
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
