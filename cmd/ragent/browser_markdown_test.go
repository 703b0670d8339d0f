package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// markdownXSS are answers a model can be talked into writing. Rendered by
// the page's own markdown module into the live page, none may create an
// element outside the renderer's fixed set, an event-handler or style
// attribute, a link to anything but http(s)/mailto, or run script.
var markdownXSS = map[string]string{
	"script tag":          `<script>window.__xss = 'script'</script>`,
	"img onerror":         `<img src=x onerror="window.__xss = 'img'">`,
	"svg onload":          `<svg onload="window.__xss = 'svg'"><circle r=1></svg>`,
	"iframe":              `<iframe src="javascript:window.__xss = 'iframe'"></iframe>`,
	"raw anchor":          `<a href="javascript:window.__xss = 'a'">x</a>`,
	"javascript link":     `[x](javascript:window.__xss='link')`,
	"mixed-case scheme":   `[x](JaVaScRiPt:alert(1))`,
	"scheme with tab":     "[x](java\tscript:alert(1))",
	"entity scheme":       `[x](javascript&#58;alert(1))`,
	"data URL":            `[x](data:text/html,<script>alert(1)</script>)`,
	"vbscript":            `[x](vbscript:msgbox(1))`,
	"javascript autolink": `<javascript:alert(1)>`,
	"href breakout":       `[a](https://example.com/"onmouseover="window.__xss='breakout')`,
	"title breakout":      `[a](https://example.com/ "t\" onmouseover=\"alert(1)")`,
	"autolink breakout":   `<https://example.com/"onclick="alert(1)>`,
	"bare URL breakout":   `see https://example.com/"><img src=x onerror=alert(1)>`,
	"citation link":       `[1](javascript:alert(1))`,
	"label with html":     `[<img src=x onerror=alert(1)>](https://example.com/)`,
	"code span":           "`<img src=x onerror=alert(1)>`",
	"fence language":      "```\"><img src=x onerror=alert(1)>\ncode\n```",
	"heading":             `# <script>alert(1)</script>`,
	"table cell":          "| a | b |\n|:-|-:|\n| <img src=x onerror=alert(1)> | [x](javascript:alert(1)) |",
	"list and quote":      "- <svg/onload=alert(1)>\n> <iframe srcdoc=x>",
	"entities":            `&lt;script&gt;alert(1)&lt;/script&gt; &#x3C;img src=x onerror=alert(1)&#x3E;`,
	"emphasis in markup":  `**<b onclick=alert(1)>x</b>** _<i onclick=alert(1)>_`,
}

// markdownReDoS are lines that made the old renderer backtrack: 12,000
// brackets froze the page for 12.5 s. Each must render within
// markdownBudget (the best of three runs, so a loaded machine does not fail
// it; the old renderer needed seconds for a quarter of these lengths).
var markdownReDoS = map[string]string{
	"brackets":         strings.Repeat("[", 12000),
	"open links":       strings.Repeat("[[[[", 3000) + "](",
	"nested links":     strings.Repeat("[a](", 3000) + strings.Repeat(")", 3000),
	"close-open":       strings.Repeat("](", 6000),
	"parentheses":      "[a](" + strings.Repeat("(", 6000) + strings.Repeat(")", 6000),
	"stars":            strings.Repeat("*", 12000),
	"spaced stars":     strings.Repeat("* ", 6000) + "x",
	"unclosed strong":  strings.Repeat("**a ", 3000),
	"unclosed strike":  strings.Repeat("~~a ", 3000),
	"underscores":      strings.Repeat("_", 12000),
	"word underscores": strings.Repeat("_a", 6000),
	"unclosed dunder":  strings.Repeat("__a ", 3000),
	"backticks":        strings.Repeat("`", 12000),
	"backtick runs":    strings.Repeat("`a``", 3000),
	"quotes":           strings.Repeat(">", 12000),
	"lists":            strings.Repeat("- ", 6000) + "x",
	"heading spaces":   "# a" + strings.Repeat(" ", 12000) + "b",
	"fence info":       "```" + strings.Repeat("a", 12000) + "`",
	"table separator":  "| a |\n" + strings.Repeat(" ", 12000) + "x",
	"wide table":       strings.Repeat("|a", 1500) + "|\n" + strings.Repeat("|-", 1500) + "|\n" + strings.Repeat("|\n", 3000),
	"autolinks":        strings.Repeat("<http://", 1500),
	"bare URLs":        strings.Repeat("http://a ", 1500),
}

const markdownBudget = 200 * time.Millisecond

// hostileRendering renders the tables above with the page's own modules and
// checks t() interpolation of names holding replacement patterns.
func hostileRendering(t *testing.T, tb *tab) {
	t.Helper()
	xss, _ := json.Marshal(markdownXSS)
	redos, _ := json.Marshal(markdownReDoS)
	js := `(async () => {
	const { renderMarkdown } = await import('/assets/markdown.js');
	const { setTrustedHTML } = await import('/assets/dom.js');
	const { t } = await import('/assets/i18n.js');
	const opts = { citations: (n) => n === 1 };
	const tags = new Set(['p', 'br', 'strong', 'em', 'del', 'code', 'pre', 'a', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6',
		'ul', 'ol', 'li', 'blockquote', 'hr', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'div', 'span', 'button',
		'svg', 'rect', 'path']);
	const box = document.createElement('div');
	box.className = 'md';
	document.body.append(box);
	const problems = [];
	for (const [name, src] of Object.entries(` + string(xss) + `)) {
		setTrustedHTML(box, renderMarkdown(src, opts)); // as the chat renders answers
		for (const el of box.querySelectorAll('*')) {
			const tag = el.localName;
			if (!tags.has(tag)) problems.push(name + ': element <' + tag + '>');
			for (const a of el.attributes) {
				const v = a.value;
				if (a.name.startsWith('on') || ['src', 'srcdoc', 'action', 'formaction', 'xlink:href'].includes(a.name)) {
					problems.push(name + ': attribute ' + a.name + ' on <' + tag + '>');
				}
				if (a.name === 'href' && !/^(https?:\/\/|mailto:)/i.test(v)) problems.push(name + ': href ' + v);
				if (a.name === 'style') problems.push(name + ': style ' + v);
			}
		}
	}
	box.remove();
	const slow = [];
	const times = {};
	for (const [name, src] of Object.entries(` + string(redos) + `)) {
		let best = Infinity;
		for (let i = 0; i < 3; i++) {
			const t0 = performance.now();
			renderMarkdown(src, opts);
			best = Math.min(best, performance.now() - t0);
		}
		times[name] = Math.round(best);
		if (best > ` + strconv.FormatInt(markdownBudget.Milliseconds(), 10) + `) slow.push(name + ': ' + Math.round(best) + ' ms');
	}
	// A name with replacement patterns is inserted as it is.
	const name = "A$&B$` + "`" + `C$'D$$E";
	const titled = t('intents.editTitle', { name });
	if (!titled.includes(name)) problems.push('t() mangled ' + name + ' into ' + titled);
	// Let any handler that was created fire before reporting.
	await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
	if (window.__xss) problems.push('script ran: ' + window.__xss);
	return JSON.stringify({ problems, slow, times });
})()`
	ctx, cancel := context.WithTimeout(tb.ctx, 2*time.Minute)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.failureScreenshot(t)
		t.Fatalf("render hostile markdown: %v", err)
	}
	var res struct {
		Problems, Slow []string
		Times          map[string]int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	for _, p := range res.Problems {
		t.Error(p)
	}
	for _, s := range res.Slow {
		t.Errorf("slower than %v: %s", markdownBudget, s)
	}
	t.Logf("best render times (ms): %v", res.Times)
}
