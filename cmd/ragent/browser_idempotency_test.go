package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/ragent-go/ragent/internal/testenv"
)

// The web UI sends an Idempotency-Key with a question and with an admin
// create, and the same key again when the user repeats that action after
// its answer was lost on the way back (the server took it, the page saw a
// reset connection): a question asked again with the retry button makes
// no second turn (the retry follows the first answer), and a create
// submitted again makes no second group and shows no conflict.
func TestBrowserRepeatedActionRunsOnce(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	db := connectDB(t, cfg.DatabaseURL)
	count := func(t *testing.T, q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	_, _, b := startBrowser(t, cfg)
	tb := b.signedIn(t, "admin", false)
	tb.visible(t, `[data-testid=composer]`)
	step := steps(t)

	step("a question retried after its answer was cut is one turn", func(t *testing.T) {
		const q = "what is the refund policy?"
		streams := llm.streams.Load()
		cut := tb.cutResponse(t, "*/api/v1/chat")
		tb.ask(t, q)
		first := headerOf(cut(), "Idempotency-Key")
		if first == "" {
			t.Error("the question was sent without an Idempotency-Key")
		}
		last := `[data-testid=message-list] > article:last-child`
		tb.poll(t, "the cut answer to fail", stepTimeout, fmt.Sprintf(`document.querySelector(%s)?.dataset.status === 'failed'`, quoteJS(last)))
		// The server took the question: its answer runs on without the page.
		testenv.Eventually(t, 2*stepTimeout, "the first answer saved", func() bool {
			return count(t, `SELECT count(*) FROM messages a JOIN messages q ON a.reply_to = q.id
				WHERE q.content = $1 AND a.role = 'assistant' AND a.status = 'completed'`, q) == 1
		})
		tb.screenshot(t, "idempotency-cut-answer")
		// Retry until answered: a retry that meets the first request's
		// submit lock still held is refused (409) and can be retried too.
		for attempt := 0; ; attempt++ {
			tb.click(t, last+` [data-testid=retry-button]`)
			tb.poll(t, "the retry to end", 2*stepTimeout, fmt.Sprintf(`(() => {
				const s = document.querySelector(%s)?.dataset.status;
				return s === 'completed' || s === 'failed';
			})()`, quoteJS(last)))
			if tb.evalString(t, fmt.Sprintf(`document.querySelector(%s).dataset.status`, quoteJS(last))) == "completed" {
				break
			}
			if attempt == 3 {
				t.Fatalf("the retry failed %d times: %s", attempt+1, tb.text(t, last))
			}
		}
		tb.screenshot(t, "idempotency-retried-answer")
		if n := count(t, `SELECT count(*) FROM messages WHERE role = 'user' AND content = $1`, q); n != 1 {
			t.Errorf("the question is stored %d times, want once", n)
		}
		if n := llm.streams.Load() - streams; n != 1 {
			t.Errorf("the model answered %d times, want once", n)
		}
	})

	step("a create submitted again after its answer was cut is one group", func(t *testing.T) {
		tb.click(t, `[data-testid=nav-groups]`)
		tb.visible(t, `[data-testid=group-form]`)
		cut := tb.cutResponse(t, "*/api/v1/groups")
		tb.sendKeys(t, `#group-name`, "support")
		tb.click(t, `[data-testid=group-submit]`)
		if headerOf(cut(), "Idempotency-Key") == "" {
			t.Error("the create was sent without an Idempotency-Key")
		}
		tb.visible(t, `[data-testid=group-form] .form-error`)
		tb.click(t, `[data-testid=group-submit]`)
		tb.visible(t, `[data-testid=group-row][data-name=support]`)
		if msg := tb.evalString(t, `(() => { const e = document.querySelector('[data-testid=group-form] .form-error'); return e.hidden ? '' : e.textContent; })()`); msg != "" {
			t.Errorf("the repeated create shows %q, want the created group", msg)
		}
		if n := count(t, `SELECT count(*) FROM groups WHERE name = 'support'`); n != 1 {
			t.Errorf("%d groups named support, want 1", n)
		}
	})
}

// cutResponse makes the tab's next request matching pattern (a Fetch-domain
// wildcard) reach the server and lose its answer: it is paused when its
// response headers arrive and failed as a reset connection, as a network
// cut right after the server took the request. The returned func waits
// until that happened and returns the request's headers.
func (tb *tab) cutResponse(t *testing.T, pattern string) (wait func() network.Headers) {
	t.Helper()
	next := tb.pauseNext(t, pattern, fetch.RequestStageResponse)
	return func() network.Headers {
		t.Helper()
		var h network.Headers
		next(func(ev fetch.EventRequestPaused) error {
			h = ev.Request.Headers
			_, err := chromedp.Call(tb.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID,
				ErrorReason: network.ErrorReasonConnectionReset})
			return err
		})
		return h
	}
}

// headerOf returns header name of h (names compared without case), "" when
// it is not there.
func headerOf(h network.Headers, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return s
		}
	}
	return ""
}
