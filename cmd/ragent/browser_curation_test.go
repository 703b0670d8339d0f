package main

import (
	"fmt"
	"testing"
)

// lastAnswer is the JavaScript for the text of the newest completed answer.
const lastAnswer = `(() => {
	const m = [...document.querySelectorAll('[data-testid=assistant-message][data-status=completed]')];
	return m.length ? m[m.length - 1].querySelector('[data-testid=answer]').textContent : '';
})()`

// An admin sees a wrong answer, fixes the chunk it came from in the
// document's chunk list, and the next answer says the new text; the admin
// then gives it a thumbs down with a comment and finds it on the feedback
// page.
func TestBrowserCurationAndFeedback(t *testing.T) {
	_, api, b := startBrowser(t, testConfig(t))
	kb := api.createKB("handbook")
	doc := api.uploadAccepted(kb, "leave.md", []byte("# Leave\n\nThe zebrafish policy grants fifteen days of paid leave per year.\n"))
	api.waitReady(doc.ID)
	const question = "How many days of leave does the zebrafish policy grant?"

	step := steps(t)
	tb := b.signedIn(t, "admin", false)
	step("the answer quotes the parsed text", func(t *testing.T) {
		tb.ask(t, question)
		tb.poll(t, "an answer with fifteen days", stepTimeout, lastAnswer+`.includes('fifteen days')`)
	})

	step("the admin edits the chunk", func(t *testing.T) {
		tb.open(t, "/#/admin/docs/"+kb)
		row := fmt.Sprintf(`[data-testid=doc-row][data-doc-id=%q]`, doc.ID)
		tb.click(t, row+` [data-testid=doc-chunks]`)
		tb.visible(t, `[data-testid=chunk-dialog] [data-testid=chunk-edit]`)
		tb.click(t, `[data-testid=chunk-dialog] [data-testid=chunk-edit]`)
		tb.fill(t, `[data-testid=chunk-editor]`, "The zebrafish policy grants twenty-five days of paid leave per year.")
		tb.click(t, `[data-testid=chunk-save]`)
		tb.visible(t, `[data-testid=chunk-item][data-revision="1"]`)
		tb.click(t, `[data-testid=chunk-history-button]`)
		tb.visible(t, `[data-testid=chunk-revision][data-revision="1"]`)
		tb.screenshot(t, "chunk-curation")
		tb.click(t, `[data-testid=modal-close]`)
	})

	step("the next answer says the new text", func(t *testing.T) {
		tb.askInNewChat(t, question, "an answer with twenty-five days", lastAnswer+`.includes('twenty-five days')`)
	})

	step("a thumbs down reaches the feedback page", func(t *testing.T) {
		last := `[data-testid=assistant-message][data-status=completed]:last-of-type`
		tb.click(t, last+` [data-testid=feedback-down]`)
		tb.visible(t, last+` [data-testid=feedback-comment]`)
		tb.sendKeys(t, last+` [data-testid=feedback-comment]`, "should mention carry-over")
		tb.click(t, last+` [data-testid=feedback-send]`)
		// The rating is stored at the first click, the comment with the
		// send: the feedback page lists what was stored when it loads.
		tb.poll(t, "the comment stored", stepTimeout, `(b => b?.dataset.rating === 'down' && b.dataset.commentSaved === 'true')(document.querySelector('[data-testid=assistant-message][data-status=completed]:last-of-type [data-testid=feedback-bar]'))`)
		tb.click(t, `[data-testid=nav-feedback]`)
		tb.visible(t, `[data-testid=feedback-row][data-rating=down]`)
		tb.waitText(t, `[data-testid=feedback-row][data-rating=down] [data-testid=feedback-question]`, "zebrafish")
		tb.waitText(t, `[data-testid=feedback-row][data-rating=down] [data-testid=feedback-comment-text]`, "carry-over")
		tb.eval(t, `document.querySelector('#feedback-rating').value = 'up'`)
		tb.click(t, `[data-testid=feedback-search]`)
		tb.poll(t, "no upvotes", stepTimeout, `document.querySelectorAll('[data-testid=feedback-row]').length === 0`)
		tb.screenshot(t, "feedback-page")
	})

	for _, m := range tb.unexpectedConsole() {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}

// An admin deletes the chunk an answer came from, finds it under the
// document's deleted chunks, reads its history there and restores it: the
// answer loses the text and gets it back.
func TestBrowserRestoreDeletedChunk(t *testing.T) {
	_, api, b := startBrowser(t, testConfig(t))
	kb := api.createKB("handbook")
	doc := api.uploadAccepted(kb, "leave.md", []byte("# Leave\n\nThe zebrafish policy grants fifteen days of paid leave per year.\n"))
	api.waitReady(doc.ID)
	chunk := api.curatedChunks(doc.ID)[0]
	const question = "How many days of leave does the zebrafish policy grant?"
	item := fmt.Sprintf(`[data-testid=chunk-item][data-chunk-id=%q]`, chunk.ID)
	gone := fmt.Sprintf(`[data-testid=chunk-deleted-item][data-chunk-id=%q]`, chunk.ID)

	step := steps(t)
	tb := b.signedIn(t, "admin", false)
	openChunks := func(t *testing.T) {
		tb.open(t, "/#/admin/docs/"+kb)
		tb.click(t, fmt.Sprintf(`[data-testid=doc-row][data-doc-id=%q] [data-testid=doc-chunks]`, doc.ID))
		tb.visible(t, `[data-testid=chunk-dialog]`)
	}
	step("the admin deletes the chunk", func(t *testing.T) {
		openChunks(t)
		tb.click(t, item+` [data-testid=chunk-delete]`)
		tb.click(t, `[data-testid=confirm-ok]`)
		tb.visible(t, gone)
		tb.waitText(t, gone+` [data-testid=chunk-content]`, "fifteen days")
		tb.poll(t, "the chunk left the list", stepTimeout, fmt.Sprintf(`!document.querySelector('[data-testid=chunk-item][data-chunk-id=%q]')`, chunk.ID))
		tb.click(t, gone+` [data-testid=chunk-history-button]`)
		tb.visible(t, gone+` [data-testid=chunk-revision][data-action=delete]`)
		tb.screenshot(t, "chunk-deleted")
		tb.click(t, `[data-testid=modal-close]`)
	})
	step("the answer no longer has the text", func(t *testing.T) {
		tb.askInNewChat(t, question, "an answer without fifteen days", lastAnswer+` !== '' && !`+lastAnswer+`.includes('fifteen days')`)
	})
	step("the admin restores it", func(t *testing.T) {
		openChunks(t)
		tb.click(t, gone+` [data-testid=chunk-undelete]`)
		tb.visible(t, item)
		tb.poll(t, "the deletions emptied", stepTimeout, `document.querySelector('[data-testid=chunk-deleted]').hidden`)
		tb.click(t, `[data-testid=modal-close]`)
	})
	step("the next answer has the text again", func(t *testing.T) {
		tb.askInNewChat(t, question, "an answer with fifteen days", lastAnswer+`.includes('fifteen days')`)
	})
	if got := api.revisions(chunk.ID); len(got) != 2 || got[0].Action != "restore" {
		t.Errorf("history after the restore in the browser: %+v", got)
	}
	for _, m := range tb.unexpectedConsole() {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}

// askInNewChat asks question in a new chat from wherever the tab is and
// waits, as what, until cond (JavaScript, e.g. over lastAnswer) holds.
func (tb *tab) askInNewChat(t *testing.T, question, what, cond string) {
	t.Helper()
	tb.click(t, `[data-testid=nav-chat]`)
	tb.click(t, `[data-testid=new-chat-button]`)
	tb.ask(t, question)
	tb.poll(t, what, stepTimeout, cond)
}
