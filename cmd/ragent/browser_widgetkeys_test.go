package main

import (
	"context"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// An admin creates a widget key on the widgets page (knowledge base,
// allowed site, rates), copies the snippet it shows, and that snippet,
// pasted as it is into a page of another origin, chats there; the key is
// listed with its site and rates (not among the API keys), and once revoked
// in the page the widget is refused.
func TestBrowserWidgetKeys(t *testing.T) {
	llm := newFakeLLM(t)
	in, api, b := startBrowser(t, chatConfig(t, llm))
	kb := seedKnowledge(t, in, in.login(t, "admin", "admin-password"))
	kbName := "kb-" + t.Name()

	var snippet atomic.Pointer[string]
	snippet.Store(new(string))
	site := customerPage(t, func() string { return *snippet.Load() })

	ta := b.signedIn(t, "admin", false)
	// The copy button writes to the clipboard and the test reads it back.
	for _, perm := range []string{"clipboard-read", "clipboard-write"} {
		ctx, cancel := context.WithTimeout(ta.ctx, stepTimeout)
		_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: perm}, Setting: cdpbrowser.PermissionSettingGranted, Origin: in.url})
		cancel()
		if err != nil {
			t.Fatalf("grant %s: %v", perm, err)
		}
	}

	step := steps(t)
	var copied string
	step("create a widget key and copy its snippet", func(t *testing.T) {
		ta.click(t, `[data-testid=nav-widgets]`)
		ta.visible(t, `[data-testid=widgetkey-form]`)
		ta.visible(t, `[data-testid=widgetkey-kb][data-kb-id="`+kb+`"]`)
		ta.sendKeys(t, `#widgetkey-name`, "help box")
		ta.click(t, `[data-testid=widgetkey-kb][data-kb-id="`+kb+`"]`)
		// A path is not an origin: the server's refusal shows in the form.
		ta.sendKeys(t, `#widgetkey-origins`, site.URL+"/help")
		ta.click(t, `[data-testid=widgetkey-submit]`)
		ta.poll(t, "the form's error", stepTimeout, `(() => { const e = document.querySelector('[data-testid=widgetkey-form] .form-error'); return !!e && !e.hidden && e.textContent.includes('400'); })()`)
		ta.fill(t, `#widgetkey-origins`, site.URL+"/\nhttps://intranet.example.com")
		ta.sendKeys(t, `#widgetkey-visitor-rate`, "5")
		ta.click(t, `[data-testid=widgetkey-submit]`)
		ta.visible(t, `[data-testid=widgetkey-dialog]`)
		ta.screenshot(t, "widgetkey-created")

		shown := ta.evalString(t, `document.querySelector('#widgetkey-snippet').value`)
		want := regexp.MustCompile(`^<script src="` + regexp.QuoteMeta(in.url) + `/widget\.js" data-key="(pk_[A-Za-z0-9_-]+)"></script>$`)
		if !want.MatchString(shown) {
			t.Fatalf("snippet %q, want %s", shown, want)
		}
		ta.click(t, `[data-testid=widgetkey-copy]`)
		ta.poll(t, "the copy", stepTimeout, `document.querySelector('[data-testid=widgetkey-copy]')?.dataset.copied === 'true'`)
		ctx, cancel := context.WithTimeout(ta.ctx, stepTimeout)
		defer cancel()
		clip, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
		if err != nil || clip != shown {
			t.Fatalf("clipboard %q, %v; want the snippet %q", clip, err, shown)
		}
		copied = clip

		ta.click(t, `[data-testid=widgetkey-dialog-close]`)
		ta.poll(t, "the dialog to close", stepTimeout, `!document.querySelector('[data-testid=widgetkey-dialog]')`)
		ta.visible(t, `[data-testid=widgetkey-row][data-name="help box"]`)
		row := ta.text(t, `[data-testid=widgetkey-row][data-name="help box"]`)
		key := want.FindStringSubmatch(shown)[1]
		for _, s := range []string{kbName, site.URL, "https://intranet.example.com", "60 / 5", key[:10]} {
			if !strings.Contains(row, s) {
				t.Errorf("row %q lacks %q", row, s)
			}
		}
		if strings.Contains(row, key[10:]) {
			t.Errorf("row %q shows the key", row)
		}
		// Among the API keys it is not listed (it has this page).
		ta.open(t, "/#/api-keys")
		ta.visible(t, `[data-testid=apikey-table] .empty-row`)
		if n := ta.count(t, `[data-testid=apikey-row]`); n != 0 {
			t.Errorf("%d widget keys among the API keys", n)
		}
		var keys struct {
			Items []struct {
				Kind   string
				Widget struct {
					Origins                 []string
					OriginRate, VisitorRate int
				}
			}
		}
		api.do("GET", "/api/v1/api-keys", nil).json(t, &keys)
		if len(keys.Items) != 1 || keys.Items[0].Kind != "widget" || keys.Items[0].Widget.VisitorRate != 5 ||
			strings.Join(keys.Items[0].Widget.Origins, " ") != site.URL+" https://intranet.example.com" {
			t.Errorf("keys %+v", keys.Items)
		}
	})

	tv := b.tab(t, "visitor", true)
	step("the copied snippet chats on the site", func(t *testing.T) {
		snippet.Store(&copied)
		tv.do(t, "open the site", stepTimeout, chromedp.Navigate(site.URL+"/"))
		tv.poll(t, "the widget", stepTimeout, widgetJS(`root.querySelector('.launcher') !== null`))
		askWidget(t, tv, "How do I connect to the VPN?")
		last := `[...root.querySelectorAll('.msg.assistant')].pop()`
		tv.poll(t, "the answer to finish", 2*stepTimeout, widgetJS(last+`?.dataset.state === 'done'`))
		if answer := tv.evalString(t, widgetJS(last+`.textContent`)); !strings.Contains(answer, "Hello from the model") {
			t.Errorf("answer %q", answer)
		}
		if n := tv.evalInt(t, widgetJS(last+`.querySelectorAll('.cite').length`)); n != 1 {
			t.Errorf("%d citations, want [1] marked", n)
		}
		tv.screenshot(t, "widgetkey-site-answer")
	})

	step("revoked on the page, refused on the site", func(t *testing.T) {
		ta.open(t, "/#/admin/widgets")
		ta.visible(t, `[data-testid=widgetkey-row][data-name="help box"]`)
		ta.click(t, `[data-testid=widgetkey-revoke]`)
		ta.click(t, `[data-testid=confirm-ok]`)
		ta.poll(t, "the row to go", stepTimeout, `!document.querySelector('[data-testid=widgetkey-row]')`)
		streams := llm.streams.Load()
		askWidget(t, tv, "And the expense policy?")
		last := `[...root.querySelectorAll('.msg.assistant')].pop()`
		tv.poll(t, "the refusal", stepTimeout, widgetJS(last+`?.dataset.state === 'refused'`))
		if n := llm.streams.Load(); n != streams {
			t.Errorf("the model answered %d times with a revoked key", n-streams)
		}
		if r := api.do("GET", "/api/v1/api-keys", nil); strings.Contains(string(r.Body), `"help box"`) {
			t.Errorf("the revoked key is still listed: %s", r.Body)
		}
	})

	// The visitor's tab logs the refused requests (the browser's CORS
	// errors, on purpose); the admin's only the refused origin's 400.
	for _, m := range ta.unexpectedConsole() {
		if m.Source == "network" && m.URL == in.url+"/api/v1/widget-keys" && strings.Contains(m.Text, "status of 400") {
			continue
		}
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
