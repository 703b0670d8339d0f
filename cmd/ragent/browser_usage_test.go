package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// An admin opens the usage page: tokens per day as bars, the top users and
// keys; sets a quota in the form and sees it listed; a user's account
// dialog shows their own month.
func TestBrowserUsage(t *testing.T) {
	in, api, b := startBrowser(t, testConfig(t), "bob")
	bob := in.client(t, in.login(t, "bob", "bob-password"))
	var me struct{ ID string }
	bob.do("GET", "/api/v1/me", nil).json(t, &me)
	bobID := me.ID
	key := createKey(t, bob, map[string]any{"name": "nightly-bot", "scopes": []string{"chat"}})

	// Ten days of usage, recorded as the meter would: bob through his key
	// (more) and in person.
	now := time.Now().UTC()
	var recs []service.UsageRecord
	for d := range 10 {
		at := now.AddDate(0, 0, -d)
		recs = append(recs,
			service.UsageRecord{CallID: fmt.Sprintf("k%d", d), At: at, UserID: mustID(t, bobID), KeyID: mustID(t, key.ID), Model: "m", Kind: service.UsageAnswer, PromptTokens: 1000 + 100*d, CompletionTokens: 200},
			service.UsageRecord{CallID: fmt.Sprintf("s%d", d), At: at, UserID: mustID(t, bobID), Model: "m", Kind: service.UsageAnswer, PromptTokens: 300, CompletionTokens: 50},
		)
	}
	if _, err := in.app.store.SaveUsage(context.Background(), recs); err != nil {
		t.Fatal(err)
	}

	tb := b.signedIn(t, "admin", false)
	tb.click(t, `[data-testid=nav-usage]`)
	tb.visible(t, `[data-testid=usage-filters]`)
	from := now.AddDate(0, 0, -13).Format(time.DateOnly)
	tb.eval(t, fmt.Sprintf(`document.querySelector('#usage-from').value = %q`, from))
	tb.click(t, `[data-testid=usage-apply]`)
	tb.poll(t, "a bar for each of the ten days", stepTimeout, `document.querySelectorAll('[data-testid=usage-bar]').length === 10`)
	day := now.Format(time.DateOnly)
	if got := tb.evalInt(t, fmt.Sprintf(`Number(document.querySelector('[data-testid=usage-bar][data-day=%q]').dataset.tokens)`, day)); got != 1000+200+300+50 {
		t.Errorf("today's bar holds %d tokens", got)
	}
	tb.visible(t, `[data-testid=usage-user-row][data-name=bob]`)
	tb.visible(t, `[data-testid=usage-key-row][data-name=nightly-bot]`)

	tb.eval(t, `document.querySelector('#quota-subject').value = 'key'`)
	tb.fill(t, `#quota-subject-id`, key.ID)
	tb.fill(t, `#quota-daily-requests`, "500")
	tb.click(t, `[data-testid=quota-submit]`)
	tb.visible(t, fmt.Sprintf(`[data-testid=quota-row][data-subject=key][data-subject-id=%q]`, key.ID))
	tb.eval(t, `window.scrollTo(0, 0)`)
	tb.screenshot(t, "usage-page") // docs/usage-page.png
	r := api.do("GET", "/api/v1/admin/quotas", nil)
	var qs struct{ Items []service.Quota }
	r.json(t, &qs)
	if r.Status != http.StatusOK || len(qs.Items) != 1 || qs.Items[0].DailyRequests != 500 || qs.Items[0].SubjectID.String() != key.ID {
		t.Fatalf("quotas after the form: %d %s", r.Status, r.Body)
	}

	// Bob's account dialog: his month.
	var month int
	for _, rec := range recs {
		if rec.At.Month() == now.Month() {
			month += rec.PromptTokens + rec.CompletionTokens
		}
	}
	bt := b.signedIn(t, "bob", true)
	bt.click(t, `[data-testid=account-button]`)
	bt.poll(t, "the month's usage", stepTimeout, fmt.Sprintf(`document.querySelector('[data-testid=account-usage]')?.dataset.tokens === %q`, fmt.Sprint(month)))

	for _, m := range append(tb.unexpectedConsole(), bt.unexpectedConsole()...) {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
