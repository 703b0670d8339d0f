package main

// Browser tests: the embedded UI in a real headless Chromium, driven by
// chromedp against an in-process instance on the test services, with the
// fake LLM as the answer model. One instance and one browser serve every
// step, in order, because each step builds on the one before (the documents
// uploaded in one are the sources of the next one's answer).
//
// Screenshots of the main screens go to $RAGENT_ARTIFACTS, else
// artifacts/screenshots at the repository root (not committed); a failing
// step also leaves a screenshot of the tab it failed in.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// defaultChromium is Debian's Chromium, which scripts/services.sh installs
// for the `browser` service; RAGENT_CHROMIUM overrides it.
const defaultChromium = "/usr/bin/chromium"

// stepTimeout bounds every browser action, so a missing element fails the
// step instead of hanging the test.
const stepTimeout = 20 * time.Second

func TestBrowserUI(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	// One answer at a time, so a second user's question visibly queues.
	cfg.ChatMaxConcurrent = 1
	in, api, b := startBrowser(t, cfg, "alice", "bob")
	admin := b.tab(t, "admin", false)

	step := steps(t)

	step("login", func(t *testing.T) {
		admin.open(t, "/")
		admin.visible(t, `[data-testid=login-form]`)
		admin.screenshot(t, "01-login")
		admin.login(t, "admin", "admin-password")
		admin.visible(t, `[data-testid=message-list]`)
		admin.visible(t, `[data-testid=composer]`)
		if got := admin.text(t, `[data-testid=current-user] .user-name`); got != "admin" {
			t.Fatalf("current user %q, want admin", got)
		}
		for _, nav := range []string{"nav-chat", "nav-kb", "nav-intents", "nav-terms", "nav-users", "nav-limiter"} {
			admin.visible(t, `[data-testid=`+nav+`]`)
		}
	})

	step("hostile markdown and i18n", func(t *testing.T) {
		hostileRendering(t, admin)
	})

	const kbName = "员工手册 Handbook"
	docs := map[string][]byte{
		"vpn-guide.md": []byte("# VPN guide\n\n## Connecting\n\nTo connect to the VPN install the GlobalProtect client and sign in with your employee id.\n\n" +
			"## 常见问题\n\n连接 VPN 失败时，请先检查网络，再重新登录客户端。\n"),
		"报销制度.docx": testdocs.Docx(t,
			testdocs.DocxParagraph("Title", "差旅报销制度")+
				testdocs.DocxParagraph("", "员工出差后应在十个工作日内提交报销申请，并附上发票原件。")+
				testdocs.DocxParagraph("", "Travel expenses are reimbursed within ten working days after approval.")),
	}
	step("upload documents", func(t *testing.T) {
		admin.click(t, `[data-testid=nav-kb]`)
		admin.visible(t, `[data-testid=kb-form]`)
		// The form checks the limits the server enforces (GET /limits).
		if got := admin.evalInt(t, `document.querySelector('#kb-name').maxLength`); got != service.MaxNameRunes {
			t.Errorf("knowledge-base name maxlength %d, want %d", got, service.MaxNameRunes)
		}
		if got := admin.evalInt(t, `+document.querySelector('#kb-chunk-size').max`); got != service.MaxChunkSize {
			t.Errorf("chunk size max %d, want %d", got, service.MaxChunkSize)
		}
		admin.sendKeys(t, `#kb-name`, kbName)
		admin.sendKeys(t, `#kb-description`, "VPN 与报销")
		admin.click(t, `[data-testid=kb-submit]`)
		row := fmt.Sprintf(`[data-testid=kb-row][data-name=%q]`, kbName)
		admin.visible(t, row)
		admin.click(t, row+` [data-testid=kb-docs-link]`)
		admin.visible(t, `[data-testid=upload-dropzone]`)

		dir := t.TempDir()
		var paths []string
		for name, content := range docs {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		slices.Sort(paths)
		admin.do(t, "choose files", stepTimeout, chromedp.SetUploadFiles(chromedp.CSS(`#upload-input`), paths))
		for name := range docs {
			admin.visible(t, fmt.Sprintf(`[data-testid=upload-item][data-name=%q][data-state=done]`, name))
		}
		// The page polls the list every 2 s while anything is pending.
		for name := range docs {
			admin.waitFor(t, "document "+name+" ready", 60*time.Second,
				fmt.Sprintf(`[data-testid=doc-row][data-name=%q][data-status=ready]`, name))
		}
		if n := admin.count(t, `[data-testid=doc-row]`); n != len(docs) {
			t.Fatalf("%d document rows, want %d", n, len(docs))
		}
		if n := admin.count(t, `[data-testid=doc-error]`); n != 0 {
			t.Fatalf("%d documents show an error", n)
		}
		admin.screenshot(t, "04-documents")
	})

	step("streamed answer with sources", func(t *testing.T) {
		admin.click(t, `[data-testid=nav-chat]`)
		admin.ask(t, "How do I connect to the VPN?")
		msg := `[data-testid=assistant-message]:last-of-type`
		admin.waitFor(t, "answer completed", 30*time.Second, msg+`[data-status=completed]`)
		if got := admin.text(t, msg+` [data-testid=answer]`); !strings.Contains(got, "Hello from the model") {
			t.Fatalf("answer %q", got)
		}
		admin.visible(t, msg+` [data-testid=sources-panel]`)
		sources := admin.text(t, msg+` [data-testid=sources-panel]`)
		if !strings.Contains(sources, "vpn-guide.md") {
			t.Fatalf("sources panel does not name vpn-guide.md: %q", sources)
		}
		// "[1]" in the answer is a citation linked to source 1.
		cite := msg + ` [data-testid=answer] [data-testid=cite][data-cite="1"]`
		admin.visible(t, cite)
		admin.click(t, cite)
		admin.visible(t, msg+` [data-testid=source-item][data-index="1"].flash`)
		admin.screenshot(t, "02-chat-answer")

		// The conversation got its title from the model, and a reload shows the history.
		admin.visible(t, `[data-testid=conversation-item][aria-current]`)
		admin.waitText(t, `[data-testid=chat-title]`, "Test title")
		admin.do(t, "reload", stepTimeout, chromedp.Reload())
		admin.visible(t, `[data-testid=user-message]`)
		admin.visible(t, `[data-testid=assistant-message][data-status=completed] [data-testid=cite]`)
		admin.visible(t, `[data-testid=assistant-message] [data-testid=source-item]`)
	})

	step("stop a long answer", func(t *testing.T) {
		admin.click(t, `[data-testid=new-chat-button]`)
		admin.ask(t, "Tell me everything #slow")
		msg := `[data-testid=assistant-message]:last-of-type`
		// Part of the answer is on screen while it still streams.
		admin.poll(t, "streamed text", 20*time.Second, `(() => {
			const m = [...document.querySelectorAll('[data-testid=assistant-message]')].pop();
			return m.dataset.status === 'streaming' && m.querySelector('[data-testid=answer]').textContent.includes('part1');
		})()`)
		admin.click(t, `[data-testid=stop-button]`)
		admin.waitFor(t, "cancelled", 10*time.Second, msg+`[data-status=cancelled] [data-testid=message-notice][data-kind=cancelled]`)
		if got := admin.text(t, msg+` [data-testid=answer]`); strings.Contains(got, "part39") {
			t.Fatalf("the whole answer arrived despite the stop: %q", got)
		}
		admin.visible(t, `[data-testid=send-button]`)
		admin.screenshot(t, "03-chat-stopped")
	})

	step("second user waits in the queue", func(t *testing.T) {
		alice := b.signedIn(t, "alice", true)
		alice.visible(t, `[data-testid=composer]`)

		// The admin's answer holds the only slot for about 5 s (3 s to the
		// first token, then 40 pieces 50 ms apart).
		admin.click(t, `[data-testid=new-chat-button]`)
		admin.ask(t, "A long one #firstslow #slow")
		waitPermits(t, api, 1)

		alice.ask(t, "Where is the expense policy?")
		alice.waitFor(t, "queue position", 10*time.Second,
			`[data-testid=assistant-message]:last-of-type [data-testid=queue-indicator][data-position="1"]`)
		if got := alice.text(t, `[data-testid=queue-indicator]`); !strings.Contains(got, "第 1 位") {
			t.Fatalf("queue indicator says %q, want 第 1 位", got)
		}
		alice.screenshot(t, "05-queue")

		admin.waitFor(t, "first answer completed", 30*time.Second, `[data-testid=assistant-message]:last-of-type[data-status=completed]`)
		alice.waitFor(t, "queued answer completed", 30*time.Second, `[data-testid=assistant-message]:last-of-type[data-status=completed]`)
		if n := alice.count(t, `[data-testid=queue-indicator]`); n != 0 {
			t.Fatalf("queue indicator still shown after the answer")
		}
		if got := alice.text(t, `[data-testid=assistant-message]:last-of-type [data-testid=answer]`); !strings.Contains(got, "Hello from the model") {
			t.Fatalf("queued answer %q", got)
		}
	})

	step("edit an intent", func(t *testing.T) {
		// The form is usable before the tree arrives. Hold the tree back until
		// the admin has typed, so its arrival must not wipe what was typed
		// (it used to, whenever the response was slower than the typing).
		release := admin.holdRequests(t, "*/api/v1/admin/intents")
		admin.click(t, `[data-testid=nav-intents]`)
		admin.visible(t, `[data-testid=intent-form]`)
		admin.sendKeys(t, `#intent-code`, "it.vpn")
		admin.sendKeys(t, `#intent-name`, "VPN 问题")
		admin.sendKeys(t, `#intent-examples`, "VPN 连不上")
		release()
		admin.visible(t, `[data-testid=intent-form][data-ready=true]`)
		if n := admin.evalInt(t, `(document.querySelector('#intent-code').value === 'it.vpn') +
			(document.querySelector('#intent-name').value === 'VPN 问题') +
			(document.querySelector('#intent-examples').value === 'VPN 连不上')`); n != 3 {
			t.Fatalf("the loaded tree wiped the typed form (%d of 3 fields kept)", n)
		}
		admin.visible(t, `[data-testid=intent-kb-option]`)
		admin.click(t, `[data-testid=intent-kb-option]`)
		admin.click(t, `[data-testid=intent-save]`)
		node := `[data-testid=intent-node][data-code="it.vpn"]`
		admin.visible(t, node)

		// Saving selects the node; edit its name and save again.
		admin.visible(t, node+`[aria-current]`)
		admin.fill(t, `#intent-name`, "VPN 与远程访问")
		admin.click(t, `[data-testid=intent-save]`)
		admin.waitText(t, node+` .tree-name`, "VPN 与远程访问")
		admin.screenshot(t, "06-intents")

		var tree struct {
			Items []struct {
				Code, Name       string
				KnowledgeBaseIDs []string `json:"knowledgeBaseIds"`
				Examples         []string
			}
		}
		api.do("GET", "/api/v1/admin/intents", nil).json(t, &tree)
		if len(tree.Items) != 1 || tree.Items[0].Name != "VPN 与远程访问" || tree.Items[0].Code != "it.vpn" ||
			len(tree.Items[0].KnowledgeBaseIDs) != 1 || !slices.Equal(tree.Items[0].Examples, []string{"VPN 连不上"}) {
			t.Fatalf("stored intents %+v", tree.Items)
		}
	})

	step("edit a term mapping", func(t *testing.T) {
		admin.click(t, `[data-testid=nav-terms]`)
		admin.visible(t, `[data-testid=term-form]`)
		admin.sendKeys(t, `#term-source`, "GP")
		admin.sendKeys(t, `#term-target`, "GlobalProtect")
		admin.click(t, `[data-testid=term-submit]`)
		row := `[data-testid=term-row][data-source="GP"]`
		admin.visible(t, row)

		admin.click(t, row+` [data-testid=term-edit]`)
		admin.fill(t, `#term-target`, "GlobalProtect VPN 客户端")
		admin.click(t, `[data-testid=term-submit]`)
		admin.waitText(t, row, "GlobalProtect VPN 客户端")
		admin.screenshot(t, "07-terms")

		var list struct {
			Items []struct{ SourceTerm, TargetTerm string }
		}
		api.do("GET", "/api/v1/admin/term-mappings", nil).json(t, &list)
		if len(list.Items) != 1 || list.Items[0].SourceTerm != "GP" || list.Items[0].TargetTerm != "GlobalProtect VPN 客户端" {
			t.Fatalf("stored term mappings %+v", list.Items)
		}
	})

	step("admin list row actions", func(t *testing.T) { adminListActions(t, admin, in, api) })

	step("plain user has no admin pages", func(t *testing.T) {
		bob := b.signedIn(t, "bob", true)
		bob.visible(t, `[data-testid=composer]`)
		bob.visible(t, `[data-testid=nav-chat]`)
		for _, nav := range []string{"nav-kb", "nav-intents", "nav-terms", "nav-users", "nav-limiter"} {
			if n := bob.count(t, `[data-testid=`+nav+`]`); n != 0 {
				t.Errorf("plain user sees %s", nav)
			}
		}
		for _, route := range []string{"#/admin/intents", "#/admin/kb", "#/admin/users"} {
			bob.eval(t, "location.hash = "+quoteJS(route))
			bob.visible(t, `[data-testid=forbidden]`)
			bob.click(t, `[data-testid=nav-chat]`)
			bob.visible(t, `[data-testid=composer]`)
		}
		bob.eval(t, `location.hash = "#/admin/terms"`)
		bob.visible(t, `[data-testid=forbidden]`)
		bob.screenshot(t, "08-forbidden")

		// The browser's own session cookie gets 403 from the admin API.
		cookie := bob.sessionCookie(t)
		for _, path := range []string{"/api/v1/admin/intents", "/api/v1/admin/term-mappings", "/api/v1/users", "/api/v1/admin/limiter"} {
			req, _ := http.NewRequest("GET", in.url+path, nil)
			req.AddCookie(cookie)
			if r := roundTrip(t, req); r.Status != http.StatusForbidden {
				t.Errorf("GET %s with the user's cookie: %d, want 403", path, r.Status)
			}
		}
	})

	step("phone width", func(t *testing.T) {
		admin.do(t, "phone viewport", stepTimeout, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		admin.click(t, `[data-testid=nav-chat]`)
		// The conversation list becomes a drawer behind a toggle.
		admin.visible(t, `[data-testid=conv-drawer-toggle]`)
		admin.visible(t, `[data-testid=composer]`)
		if overflow := admin.evalInt(t, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); overflow > 0 {
			t.Errorf("the page is %dpx wider than a 390px phone", overflow)
		}
		admin.screenshot(t, "09-chat-phone")
		admin.click(t, `[data-testid=conv-drawer-toggle]`)
		admin.visible(t, `[data-testid=conversation-item]`)
	})

	step("no console errors", func(t *testing.T) {
		for _, tb := range b.open {
			for _, m := range tb.unexpectedConsole() {
				t.Errorf("%s tab: %s (%s:%d)", tb.name, m, m.URL, m.Line+1)
			}
		}
	})
}

// chromiumPath finds the browser: missing, it fails the test in CI and skips
// it elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("RAGENT_CHROMIUM")
	if p == "" {
		p = defaultChromium
	}
	if _, err := exec.LookPath(p); err != nil {
		if testenv.Required() {
			t.Fatalf("chromium unavailable (RAGENT_REQUIRE_SERVICES=1): %v; run scripts/services.sh start browser", err)
		}
		t.Skipf("chromium unavailable: %v; run scripts/services.sh start browser to run the browser tests", err)
	}
	return p
}

// startBrowser finds Chromium, starts an instance on cfg with the given
// plain users (each with the password signedIn expects) and a browser on
// it; it returns the admin's API client too, which seeds each test's data.
func startBrowser(t *testing.T, cfg Config, users ...string) (*instance, *client, *browser) {
	t.Helper()
	chromium := chromiumPath(t)
	in := start(t, cfg)
	adminToken := in.login(t, "admin", "admin-password")
	for _, u := range users {
		in.createUser(t, adminToken, u, u+"-password", "user")
	}
	return in, in.client(t, adminToken), newBrowser(t, chromium, in.url)
}

// browser is one Chromium process. The first tab uses the default browser
// context; later ones may get their own (their own cookie jar), so several
// users can be logged in at once. Only the test goroutine uses it.
type browser struct {
	ctx  context.Context // the first tab's context, which owns the process
	base string
	dir  string // screenshots
	open []*tab
}

func newBrowser(t *testing.T, chromium, base string) *browser {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		// /dev/shm is small in containers; Chromium crashes when it fills.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		chromedp.Cancel(cctx)
		cancel()
		// Waits for the process to exit, before t.TempDir removes its profile.
		cancelAlloc()
	})
	return &browser{ctx: ctx, base: base, dir: artifactDir(t)}
}

// steps returns a runner of t's subtests that stops the test at the first
// failure: a browser test's later steps need what earlier ones built.
func steps(t *testing.T) func(name string, f func(t *testing.T)) {
	return func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
}

// signedIn opens a tab on the home page and logs user in with the password
// every test gives its users ("<name>-password").
func (b *browser) signedIn(t *testing.T, user string, isolated bool) *tab {
	t.Helper()
	tb := b.tab(t, user, isolated)
	tb.open(t, "/")
	tb.login(t, user, user+"-password")
	return tb
}

// tab opens a tab; isolated puts it in a fresh browser context.
func (b *browser) tab(t *testing.T, name string, isolated bool) *tab {
	t.Helper()
	ctx := b.ctx
	if len(b.open) > 0 {
		var opts []chromedp.ContextOption
		if isolated {
			opts = append(opts, chromedp.WithNewBrowserContext())
		}
		var cancel context.CancelFunc
		ctx, cancel = chromedp.NewContext(b.ctx, opts...)
		t.Cleanup(cancel)
	}
	// The first Run starts the browser (or the tab) and binds it to ctx, so
	// it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start browser tab %s: %v", name, err)
	}
	tb := &tab{name: name, ctx: ctx, b: b}
	// Subscribe before the first navigation so no message is missed.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = append(tb.console, m)
			tb.mu.Unlock()
		}
	}()
	tb.do(t, "viewport", stepTimeout, chromedp.EmulateViewport(1280, 860))
	b.open = append(b.open, tb)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range tb.messages() {
				t.Logf("%s console: %s (%s:%d)", name, m, m.URL, m.Line+1)
			}
		}
	})
	return tb
}

// tab is one page, logged in as one user.
type tab struct {
	name string
	ctx  context.Context
	b    *browser

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// do runs actions with a timeout; on failure it saves a screenshot of the
// tab and fails the test.
func (tb *tab) do(t *testing.T, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("not within %v", timeout)
		}
		tb.failureScreenshot(t)
		t.Fatalf("%s tab: %s: %v", tb.name, what, err)
	}
}

func (tb *tab) open(t *testing.T, path string) {
	t.Helper()
	tb.do(t, "open "+path, stepTimeout, chromedp.Navigate(tb.b.base+path))
}

func (tb *tab) visible(t *testing.T, css string) {
	t.Helper()
	tb.waitFor(t, css, stepTimeout, css)
}

func (tb *tab) waitFor(t *testing.T, what string, timeout time.Duration, css string) {
	t.Helper()
	tb.do(t, "wait for "+what, timeout, chromedp.WaitVisible(chromedp.CSS(css)))
}

func (tb *tab) click(t *testing.T, css string) {
	t.Helper()
	tb.do(t, "click "+css, stepTimeout, chromedp.Click(chromedp.CSS(css)))
}

func (tb *tab) sendKeys(t *testing.T, css, text string) {
	t.Helper()
	tb.do(t, "type into "+css, stepTimeout, chromedp.SendKeys(chromedp.CSS(css), text))
}

// fill replaces the text of a form field by typing.
func (tb *tab) fill(t *testing.T, css, text string) {
	t.Helper()
	tb.visible(t, css)
	tb.eval(t, fmt.Sprintf(`document.querySelector(%s).value = ""`, quoteJS(css)))
	tb.sendKeys(t, css, text)
}

func (tb *tab) text(t *testing.T, css string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		tb.failureScreenshot(t)
		t.Fatalf("%s tab: text of %s: %v", tb.name, css, err)
	}
	return strings.TrimSpace(s)
}

// waitText waits until the element's text contains want.
func (tb *tab) waitText(t *testing.T, css, want string) {
	t.Helper()
	tb.poll(t, fmt.Sprintf("%s to contain %q", css, want), stepTimeout,
		fmt.Sprintf(`document.querySelector(%s)?.textContent.includes(%s)`, quoteJS(css), quoteJS(want)))
}

// count answers how many elements match now, without waiting.
func (tb *tab) count(t *testing.T, css string) int {
	t.Helper()
	return tb.evalInt(t, fmt.Sprintf(`document.querySelectorAll(%s).length`, quoteJS(css)))
}

func (tb *tab) eval(t *testing.T, js string) {
	t.Helper()
	tb.do(t, "evaluate "+js, stepTimeout, chromedp.Evaluate[chromedp.Void](js))
}

func (tb *tab) evalInt(t *testing.T, js string) int {
	t.Helper()
	return evaluate[int](t, tb, js)
}

func (tb *tab) evalString(t *testing.T, js string) string {
	t.Helper()
	return evaluate[string](t, tb, js)
}

// evaluate returns the value of the JavaScript expression js in tb, as a T
// (a method cannot have a type parameter).
func evaluate[T any](t *testing.T, tb *tab, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s tab: evaluate %s: %v", tb.name, js, err)
	}
	return v
}

// poll waits until the JavaScript expression is truthy.
func (tb *tab) poll(t *testing.T, what string, timeout time.Duration, js string) {
	t.Helper()
	tb.do(t, "wait for "+what, timeout+time.Second,
		chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
}

func (tb *tab) login(t *testing.T, username, password string) {
	t.Helper()
	tb.visible(t, `[data-testid=login-form]`)
	tb.sendKeys(t, `#login-username`, username)
	tb.sendKeys(t, `#login-password`, password)
	tb.click(t, `[data-testid=login-submit]`)
	tb.visible(t, `[data-testid=current-user]`)
}

// ask types a question into the composer, sends it, and waits until the
// question and its answer (in whatever state) are the last two messages.
func (tb *tab) ask(t *testing.T, question string) {
	t.Helper()
	tb.visible(t, `[data-testid=send-button]`)
	tb.sendKeys(t, `#chat-input`, question)
	tb.click(t, `[data-testid=send-button]`)
	tb.poll(t, "the answer to appear", stepTimeout, fmt.Sprintf(`(() => {
		const m = document.querySelectorAll('[data-testid=message-list] > article');
		const n = m.length;
		return n >= 2 && m[n-1].dataset.testid === 'assistant-message' &&
			m[n-2].dataset.testid === 'user-message' && m[n-2].textContent.trim() === %s;
	})()`, quoteJS(question)))
}

// sessionCookie returns the session cookie the browser holds for the site.
func (tb *tab) sessionCookie(t *testing.T) *http.Cookie {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.b.base + "/"}})
	if err != nil {
		t.Fatalf("%s tab: cookies: %v", tb.name, err)
	}
	for _, c := range res.Cookies {
		if c.Name == "ragent_session" {
			if !c.HTTPOnly {
				t.Errorf("session cookie is not HttpOnly")
			}
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	t.Fatalf("%s tab: no ragent_session cookie among %d", tb.name, len(res.Cookies))
	return nil
}

func (tb *tab) screenshot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("%s tab: screenshot %s: %v", tb.name, name, err)
	}
	if err := os.WriteFile(filepath.Join(tb.b.dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// failureScreenshot keeps the state of the page a step failed on; it only
// logs its own errors, since the test is failing already.
func (tb *tab) failureScreenshot(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("%s tab: failure screenshot: %v", tb.name, err)
		return
	}
	name := "failed-" + unsafeFileChars.ReplaceAllString(t.Name(), "_") + "-" + tb.name + ".png"
	p := filepath.Join(tb.b.dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Logf("%s tab: failure screenshot: %v", tb.name, err)
		return
	}
	t.Logf("%s tab: screenshot of the failure: %s", tb.name, p)
}

func (tb *tab) messages() []chromedp.ConsoleMessage {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return slices.Clone(tb.console)
}

// expectedNetworkError is the browser's own log line for a 4xx answer the
// UI asks for on purpose: GET /api/v1/me before login answers 401, which is
// how the page learns it must show the login form.
var expectedNetworkError = regexp.MustCompile(`^Failed to load resource: the server responded with a status of 401 \(Unauthorized\)$`)

// unexpectedConsole returns the console errors and uncaught exceptions of
// the tab, leaving out only the browser's network log entry for the expected
// 401 from /api/v1/me.
func (tb *tab) unexpectedConsole() []chromedp.ConsoleMessage {
	var out []chromedp.ConsoleMessage
	for _, m := range tb.messages() {
		if m.Type != chromedp.ConsoleError && !m.IsException() {
			continue
		}
		if m.Source == "network" && m.URL == tb.b.base+"/api/v1/me" && expectedNetworkError.MatchString(m.Text) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// holdRequests pauses the tab's requests whose URL matches pattern (a
// Fetch-domain wildcard) until release is called; release waits until one
// was paused, lets it go on and stops holding. It makes a response arrive
// after the user acted, on purpose instead of by chance.
func (tb *tab) holdRequests(t *testing.T, pattern string) (release func()) {
	t.Helper()
	next := tb.pauseNext(t, pattern, fetch.RequestStageRequest)
	return func() {
		t.Helper()
		next(func(ev fetch.EventRequestPaused) error {
			_, err := chromedp.Call(tb.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			return err
		})
	}
}

// pauseNext pauses the tab's next request matching pattern at stage (its
// sending or its response's headers). The returned func waits until one
// was paused (failing t after stepTimeout), hands it to act, which must
// continue or fail it, and stops pausing.
func (tb *tab) pauseNext(t *testing.T, pattern string, stage fetch.RequestStage) (next func(act func(fetch.EventRequestPaused) error)) {
	t.Helper()
	sub, unsubscribe := context.WithCancel(tb.ctx)
	t.Cleanup(unsubscribe)
	paused := chromedp.Events(sub, fetch.RequestPaused) // subscribed before Enable
	if _, err := chromedp.Call(tb.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: pattern, RequestStage: stage}}}); err != nil {
		t.Fatalf("%s tab: pause %s: %v", tb.name, pattern, err)
	}
	return func(act func(fetch.EventRequestPaused) error) {
		t.Helper()
		defer unsubscribe()
		timer := time.AfterFunc(stepTimeout, unsubscribe) // ends the wait below
		defer timer.Stop()
		var ev fetch.EventRequestPaused
		for e, err := range paused {
			if err != nil {
				t.Fatalf("%s tab: no request to %s was paused within %v: %v", tb.name, pattern, stepTimeout, err)
			}
			ev = e
			break
		}
		if err := act(ev); err != nil {
			t.Fatalf("%s tab: paused %s: %v", tb.name, pattern, err)
		}
		if _, err := chromedp.Call(tb.ctx, fetch.Disable, cdp.Empty{}); err != nil {
			t.Fatalf("%s tab: stop pausing %s: %v", tb.name, pattern, err)
		}
	}
}

// waitPermits waits until the chat limiter has n permits in use.
func waitPermits(t *testing.T, api *client, n int) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, fmt.Sprintf("%d chat permits in use", n), func() bool {
		var st struct{ PermitsInUse int }
		api.do("GET", "/api/v1/admin/limiter", nil).json(t, &st)
		return st.PermitsInUse == n
	})
}

// artifactDir is where screenshots go: $RAGENT_ARTIFACTS, else
// artifacts/screenshots at the repository root (ignored by git).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RAGENT_ARTIFACTS")
	if dir == "" {
		root, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(root)
			if parent == root {
				t.Fatal("no go.mod above the working directory")
			}
			root = parent
		}
		dir = filepath.Join(root, "artifacts", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// quoteJS quotes a string as a JavaScript string literal.
func quoteJS(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}
