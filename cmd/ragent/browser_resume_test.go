package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/ragent-go/ragent/internal/testenv"
)

// A page reloaded while an answer streams shows the same answer continuing
// (resumed from its task's events, not re-asked), to its end, once; so does
// a page whose network drops for a moment.
func TestBrowserResumeAnswer(t *testing.T) {
	llm := newFakeLLM(t)
	chromium := chromiumPath(t)
	in := start(t, chatConfig(t, llm))
	// The browser reaches the instance through a proxy the test can cut.
	proxy := testenv.NewProxy(t, strings.TrimPrefix(in.url, "http://"))
	b := newBrowser(t, chromium, "http://"+proxy.Addr())
	tb := b.tab(t, "admin", false)
	step := steps(t)
	step("login", func(t *testing.T) {
		tb.open(t, "/")
		tb.login(t, "admin", "admin-password")
		tb.visible(t, `[data-testid=composer]`)
	})

	var answers int32 // answers the model streamed so far
	// oneAnswer checks the list holds question once, answered whole.
	oneAnswer := func(t *testing.T, question string) {
		t.Helper()
		tb.poll(t, "the answer to complete", 3*stepTimeout, `document.querySelector('[data-testid=message-list] > article:last-child')?.dataset.status === 'completed'`)
		got := tb.evalInt(t, fmt.Sprintf(`[...document.querySelectorAll('[data-testid=user-message]')].filter(m => m.textContent.trim() === %s).length`, quoteJS(question)))
		if got != 1 {
			t.Fatalf("the question shows %d times", got)
		}
		answer := tb.text(t, `[data-testid=message-list] > article:last-child [data-testid=answer]`)
		for i := range 40 {
			if want := fmt.Sprintf("part%d", i); !strings.Contains(answer, want) {
				t.Fatalf("answer %q lacks %s", answer, want)
			}
		}
		if n := llm.streams.Load(); n != answers {
			t.Fatalf("%d answers streamed by the model, want %d: the question was asked again", n, answers)
		}
	}

	step("reload during the answer", func(t *testing.T) {
		q := "tell me a long story #crawl"
		answers++
		tb.ask(t, q)
		tb.poll(t, "the answer to start", stepTimeout, `(document.querySelector('[data-testid=message-list] > article:last-child [data-testid=answer]')?.textContent ?? '').includes('part1')`)
		tb.do(t, "reload", stepTimeout, chromedp.Reload())
		tb.poll(t, "the resumed answer to stream", stepTimeout, `document.querySelector('[data-testid=message-list] > article:last-child')?.dataset.status === 'streaming'`)
		tb.screenshot(t, "resume-after-reload")
		oneAnswer(t, q)
	})

	step("network drop during the answer", func(t *testing.T) {
		q := "another long story #crawl"
		answers++
		tb.click(t, `[data-testid=new-chat-button]`) // no history: no rewrite of the question
		tb.ask(t, q)
		tb.poll(t, "the answer to start", stepTimeout, `(document.querySelector('[data-testid=message-list] > article:last-child [data-testid=answer]')?.textContent ?? '').includes('part1')`)
		proxy.Down()
		tb.visible(t, `[data-testid=message-list] > article:last-child [data-testid=reconnecting-indicator]`)
		tb.screenshot(t, "resume-reconnecting")
		proxy.Up()
		oneAnswer(t, q)
	})
}
