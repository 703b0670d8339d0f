package main

import (
	"fmt"
	"testing"
	"time"
)

// The web UI shows a knowledge base's re-embedding progress ("n/m") in the
// knowledge-base list and on its documents page, which follows it until
// the switch.
func TestBrowserReembedProgress(t *testing.T) {
	chromium := chromiumPath(t)
	const dim = 64
	fake := newFakeEmbedServer(t, dim)
	cfg := testConfig(t)
	cfg.EmbedDim = dim
	first := start(t, cfg)
	api := first.adminClient(t)
	kb := api.createKB("moving-kb")
	api.uploadReady(kb, "m", 3, func(i int) string { return fmt.Sprintf("Manual %d on boiler%d valves.", i, i) })
	first.stop()

	next := cfg
	next.EmbedProvider, next.EmbedModel, next.EmbedBaseURL = "openai", "fake-model", fake.URL()
	fake.holdAfter(1)
	in := start(t, next)
	api = in.adminClient(t)
	api.waitKB(kb, 60*time.Second, "one document re-embedded", func(p kbProgress) bool {
		return p.Reembedding != nil && p.Reembedding.Done == 1
	})

	b := newBrowser(t, chromium, in.url)
	tab := b.signedIn(t, "admin", false)
	tab.click(t, `[data-testid=nav-kb]`)
	row := fmt.Sprintf(`[data-testid=kb-row][data-kb-id=%q]`, kb)
	tab.waitText(t, row+` [data-testid=kb-reembedding]`, "1/3")
	tab.screenshot(t, "kb-reembedding")
	tab.click(t, row+` [data-testid=kb-docs-link]`)
	// The documents page's own badge: the list's one may still be on
	// screen right after the click, and the page's subtitle is empty until
	// its first load of the knowledge base answers.
	const badge = `[data-testid=docs-subtitle] [data-testid=kb-reembedding]`
	tab.waitText(t, badge, "1/3")

	fake.release()
	// Once shown, the badge goes only when a load answers without a move.
	tab.poll(t, "the badge to go after the switch", 60*time.Second,
		`document.querySelector('[data-testid=docs-subtitle]') !== null && document.querySelector('`+badge+`') === null`)
	if p := api.kbProgress(kb); p.Reembedding != nil || p.EmbeddingModel != "fake-model" {
		t.Fatalf("after the switch: %+v", p)
	}
}
