package main

import (
	"image"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ragent-go/ragent/internal/scanpage"
	"github.com/ragent-go/ragent/internal/testenv"
)

// scanPages are the pages of the scanned PDF the browser test uploads: only
// the second says when the generator is tested.
var scanPages = []string{
	"Quarterly facilities report. The east wing was repainted in the spring and the car park was resurfaced.",
	"Safety checks. The backup generator is tested every Thursday morning by the facilities team.",
}

// An admin uploads a scanned PDF (no text layer) in the documents page; it
// turns ready with the OCR badge and its chunks say the page they were read
// from; a question only the scan answers is answered from it, and the
// answer cites it.
func TestBrowserOCRScanCited(t *testing.T) {
	testenv.OCR(t)
	cfg := testConfig(t)
	// A page takes up to half a minute under -race on a busy machine.
	cfg.IngestParseTimeout = 10 * time.Minute
	cfg.OCRPageTimeout = 5 * time.Minute
	_, api, b := startBrowser(t, cfg)
	kb := api.createKB("facilities")
	// A text document that shares words with the question but does not
	// answer it.
	api.waitReady(api.uploadAccepted(kb, "backups.md", []byte("# Backups\n\nThe backup server is restarted every Monday evening.\n")).ID)

	var imgs []image.Image
	for _, p := range scanPages {
		pages, _, err := scanpage.Text(p, scanpage.Options{DPI: 300})
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, pages[0])
	}
	file := filepath.Join(t.TempDir(), "facilities-scan.pdf")
	pdf, err := scanpage.PDF(imgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pdf, 0o644); err != nil {
		t.Fatal(err)
	}
	row := `[data-testid=doc-row][data-name="facilities-scan.pdf"]`

	step := steps(t)
	tb := b.signedIn(t, "admin", false)
	step("upload the scan", func(t *testing.T) {
		tb.open(t, "/#/admin/docs/"+kb)
		tb.visible(t, `[data-testid=upload-dropzone]`)
		tb.do(t, "choose the scan", stepTimeout, chromedp.SetUploadFiles(chromedp.CSS(`#upload-input`), []string{file}))
		tb.visible(t, `[data-testid=upload-item][data-name="facilities-scan.pdf"][data-state=done]`)
		// The page polls the list every 2 s while anything is pending.
		tb.waitFor(t, "the scan ready", 10*time.Minute, row+`[data-status=ready]`)
		tb.visible(t, row+` [data-testid=doc-ocr]`)
		if n := tb.count(t, `[data-testid=doc-row][data-name="backups.md"] [data-testid=doc-ocr]`); n != 0 {
			t.Fatal("the text document shows the OCR badge")
		}
		tb.click(t, row+` [data-testid=doc-chunks]`)
		tb.poll(t, "a chunk of page 2 read by OCR", stepTimeout, `[...document.querySelectorAll('[data-testid=chunk-dialog] [data-testid=chunk-item]')].some((c) =>
			c.querySelector('.chunk-section')?.textContent === 'Page 2 (OCR)' && c.textContent.includes('Thursday'))`)
		tb.screenshot(t, "ocr-document")
		tb.click(t, `[data-testid=modal-close]`)
	})

	step("the answer cites the scan", func(t *testing.T) {
		tb.click(t, `[data-testid=nav-chat]`)
		tb.ask(t, "On which day is the backup generator tested?")
		tb.poll(t, "an answer with Thursday", stepTimeout, lastAnswer+`.includes('Thursday')`)
		// The source that says Thursday is the scan, and the answer cites it.
		tb.poll(t, "a citation of the scan", stepTimeout, `(() => {
			const m = [...document.querySelectorAll('[data-testid=assistant-message][data-status=completed]')].pop();
			const src = [...m.querySelectorAll('[data-testid=source-item]')].find((s) => s.querySelector('.source-excerpt').textContent.includes('Thursday'));
			return !!src && src.querySelector('.source-name').textContent === 'facilities-scan.pdf' &&
				!!m.querySelector('[data-testid=answer] [data-testid=cite][data-cite="' + src.dataset.index + '"]');
		})()`)
		tb.screenshot(t, "ocr-answer")
	})

	for _, m := range tb.unexpectedConsole() {
		t.Errorf("console: %s (%s:%d)", m.Text, m.URL, m.Line+1)
	}
}
