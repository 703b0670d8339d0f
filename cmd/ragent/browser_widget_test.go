package main

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
)

// widgetPage serves a customer's page that embeds the widget from ragent
// (another origin) with the key *key holds when the page is asked for.
func widgetPage(t *testing.T, ragent string, key *atomic.Pointer[string]) *httptest.Server {
	t.Helper()
	return customerPage(t, func() string {
		return fmt.Sprintf(`<script src="%s/widget.js" data-key="%s" data-lang="en"></script>`, ragent, html.EscapeString(*key.Load()))
	})
}

// customerPage serves a customer's page that carries embed() (the widget's
// snippet) as it is: its own hostile CSS, a button of its own, and a hook
// that keeps the widget's closed shadow root reachable for the test (a page
// may do that; the widget still asks for a closed one).
func customerPage(t *testing.T, embed func() string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
		case "/favicon.ico":
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><title>Customer site</title>
<style>body { color: rgb(255, 0, 0); font-size: 40px; } button { background: rgb(0, 255, 0); }</style>
<script>
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (opts) {
    const root = attach.call(this, opts);
    if (this.hasAttribute("data-ragent-widget")) { window.widgetRoot = root; window.widgetMode = opts.mode; }
    return root;
  };
</script></head>
<body><h1>Customer site</h1><button id="page-button">Page button</button>
%s
</body></html>`, embed())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// widgetJS evaluates js with `root` bound to the widget's shadow root.
func widgetJS(js string) string {
	return `(() => { const root = window.widgetRoot; if (!root) return null; return (` + js + `); })()`
}

// clickWidget clicks the widget's element at its place on the screen, as a
// visitor does (the test cannot select into a closed shadow root).
func clickWidget(t *testing.T, tb *tab, css string) {
	t.Helper()
	tb.poll(t, css+" on screen", stepTimeout, widgetJS(fmt.Sprintf(`(() => { const e = root.querySelector(%s); if (!e) return false; const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; })()`, quoteJS(css))))
	x := tb.evalInt(t, widgetJS(fmt.Sprintf(`(() => { const r = root.querySelector(%s).getBoundingClientRect(); return Math.round(r.x + r.width / 2); })()`, quoteJS(css))))
	y := tb.evalInt(t, widgetJS(fmt.Sprintf(`(() => { const r = root.querySelector(%s).getBoundingClientRect(); return Math.round(r.y + r.height / 2); })()`, quoteJS(css))))
	tb.do(t, "click "+css, stepTimeout, chromedp.MouseClickXY(float64(x), float64(y)))
}

// askWidget opens the panel, types question and sends it with Enter.
func askWidget(t *testing.T, tb *tab, question string) {
	t.Helper()
	if tb.evalInt(t, widgetJS(`root.querySelector('.panel').classList.contains('open') ? 1 : 0`)) == 0 {
		clickWidget(t, tb, ".launcher") // opening focuses the input
	} else {
		clickWidget(t, tb, "textarea")
	}
	tb.poll(t, "the panel open with the input focused", stepTimeout, widgetJS(`root.querySelector('.panel.open') !== null && root.activeElement === root.querySelector('textarea')`))
	tb.do(t, "type the question", stepTimeout, chromedp.KeyEvent(question), chromedp.KeyEvent("\r"))
}

// A page on another origin loads the widget, which draws itself apart from
// the page's CSS, and a visitor asks and gets a streamed answer with a
// citation; the same page from an origin the key does not list is refused
// with a clear message, and so is the page once the key is revoked.
func TestBrowserWidget(t *testing.T) {
	llm := newFakeLLM(t)
	in, _, b := startBrowser(t, chatConfig(t, llm))
	admin := in.login(t, "admin", "admin-password")
	kb := seedKnowledge(t, in, admin)

	var key atomic.Pointer[string]
	key.Store(new(string))
	page, elsewhere := widgetPage(t, in.url, &key), widgetPage(t, in.url, &key)
	keyID, k := createWidgetKey(t, in, admin, map[string]any{"name": "customer site", "knowledgeBaseIds": []string{kb},
		"origins": []string{page.URL}})
	key.Store(&k)

	tb := b.tab(t, "visitor", false)
	step := steps(t)
	step("loads apart from the page", func(t *testing.T) {
		tb.do(t, "open the customer's page", stepTimeout, chromedp.Navigate(page.URL+"/"))
		tb.poll(t, "the widget", stepTimeout, widgetJS(`root.querySelector('.launcher') !== null`))
		if tb.evalInt(t, `window.widgetMode === 'closed' ? 1 : 0`) != 1 {
			t.Errorf("the widget's shadow root is not closed")
		}
		// The page's CSS does not reach in, the widget's does not leak out.
		if got := tb.evalInt(t, widgetJS(`parseInt(getComputedStyle(root.querySelector('.launcher')).fontSize)`)); got != 14 {
			t.Errorf("launcher font size %dpx: the page's CSS reached in", got)
		}
		if tb.evalInt(t, widgetJS(`getComputedStyle(root.querySelector('.launcher')).backgroundColor === 'rgb(37, 99, 235)' ? 1 : 0`)) != 1 {
			t.Errorf("the page's button style reached the launcher")
		}
		if tb.evalInt(t, `getComputedStyle(document.querySelector('#page-button')).backgroundColor === 'rgb(0, 255, 0)' ? 1 : 0`) != 1 {
			t.Errorf("the widget's style leaked onto the page's button")
		}
	})

	last := `[...root.querySelectorAll('.msg.assistant')].pop()`
	step("asks and gets an answer with a citation", func(t *testing.T) {
		askWidget(t, tb, "How do I connect to the VPN?")
		tb.poll(t, "the answer to finish", 2*stepTimeout, widgetJS(last+`?.dataset.state === 'done'`))
		if answer := tb.evalString(t, widgetJS(last+`.textContent`)); !strings.Contains(answer, "Hello from the model") {
			t.Errorf("answer %q", answer)
		}
		if n := tb.evalInt(t, widgetJS(last+`.querySelectorAll('.cite').length`)); n != 1 {
			t.Errorf("%d citations, want [1] marked", n)
		}
		if src := tb.evalString(t, widgetJS(last+`.querySelector('.sources')?.textContent ?? ''`)); !strings.Contains(src, "vpn.md") {
			t.Errorf("sources %q lack vpn.md", src)
		}
		tb.screenshot(t, "widget-answer")
	})

	step("a long answer streams and stops", func(t *testing.T) {
		// A fresh page: the widget's history is the page's, and a question
		// after history is rewritten by the model (losing the #slow).
		tb.do(t, "reload", stepTimeout, chromedp.Reload())
		tb.poll(t, "the widget", stepTimeout, widgetJS(`root.querySelector('.launcher') !== null`))
		streams := llm.streams.Load()
		askWidget(t, tb, "Tell me everything #slow")
		tb.poll(t, "streamed text", 2*stepTimeout, widgetJS(`(() => { const m = `+last+`; return !!m && m.dataset.state === 'streaming' && m.textContent.includes('part1') && root.querySelector('form button').classList.contains('stop'); })()`))
		clickWidget(t, tb, "form button.stop")
		tb.poll(t, "the answer to stop", stepTimeout, widgetJS(last+`?.dataset.state === 'stopped'`))
		if answer := tb.evalString(t, widgetJS(last+`.textContent`)); strings.Contains(answer, "part39") || !strings.Contains(answer, "(stopped)") {
			t.Errorf("stopped answer %q", answer)
		}
		if n := llm.streams.Load(); n != streams+1 {
			t.Errorf("%d model streams for one question", n-streams)
		}
		for _, m := range tb.unexpectedConsole() {
			t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
		}
	})

	step("refused from an origin the key does not list", func(t *testing.T) {
		other := b.tab(t, "other-site", true)
		other.do(t, "open the other page", stepTimeout, chromedp.Navigate(elsewhere.URL+"/"))
		other.poll(t, "the widget", stepTimeout, widgetJS(`root.querySelector('.launcher') !== null`))
		streams := llm.streams.Load()
		askWidget(t, other, "How do I connect to the VPN?")
		other.poll(t, "the refusal", stepTimeout, widgetJS(last+`?.dataset.state === 'refused'`))
		if got := other.evalString(t, widgetJS(last+`.textContent`)); got != "This site may not use this assistant." {
			t.Errorf("refusal %q", got)
		}
		other.screenshot(t, "widget-refused")
		if n := llm.streams.Load(); n != streams {
			t.Errorf("the model answered %d times for a refused page", n-streams)
		}
	})

	step("refused once the key is revoked", func(t *testing.T) {
		if r := in.client(t, admin).do("DELETE", "/api/v1/api-keys/"+keyID, nil); r.Status != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		askWidget(t, tb, "And the expense policy?")
		tb.poll(t, "the refusal", stepTimeout, widgetJS(last+`?.dataset.state === 'refused'`))
		if got := tb.evalString(t, widgetJS(last+`.textContent`)); got != "This assistant's key is invalid or revoked." {
			t.Errorf("refusal %q", got)
		}
	})
}
