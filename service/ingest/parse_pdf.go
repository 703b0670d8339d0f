package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/ledongthuc/pdf"

	"github.com/ragent-go/ragent/text"
)

// parsePDF extracts the text layer page by page. Scanned PDFs have none and
// end as ErrEmpty: OCR is out of scope.
func parsePDF(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Document, error) {
	pr, err := pdf.NewReader(r, size)
	if err != nil {
		if errors.Is(err, pdf.ErrInvalidPassword) || strings.Contains(err.Error(), "encrypt") {
			return nil, fmt.Errorf("%w: the PDF is password-protected", ErrEncrypted)
		}
		return nil, fmt.Errorf("%w: pdf: %v", ErrCorrupt, err)
	}
	pages := pr.NumPage()
	if pages <= 0 {
		return nil, fmt.Errorf("%w: pdf: no pages", ErrCorrupt)
	}
	if int64(pages) > limits.MaxPages {
		return nil, fmt.Errorf("%w: %d pages exceed the limit of %d", ErrTooLarge, pages, limits.MaxPages)
	}
	doc := &Document{}
	fonts := map[string]*pdf.Font{} // shared across pages: parsing a font's charmap is costly
	var extracted int64
	for i := 1; i <= pages; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		page := pr.Page(i)
		if page.V.IsNull() {
			continue
		}
		for _, name := range page.Fonts() {
			if _, ok := fonts[name]; !ok {
				f := page.Font(name)
				fonts[name] = &f
			}
		}
		s, err := page.GetPlainText(fonts)
		if err != nil {
			return nil, fmt.Errorf("%w: pdf page %d: %v", ErrCorrupt, i, err)
		}
		if extracted += int64(len(s)); extracted > limits.MaxDecompressedBytes {
			return nil, fmt.Errorf("%w: the PDF's text exceeds %d bytes", ErrTooLarge, limits.MaxDecompressedBytes)
		}
		for _, p := range splitParagraphs(cleanText(s)) {
			doc.add(Paragraph, 0, joinLines(p))
		}
	}
	return doc, nil
}

// joinLines undoes the hard line breaks of PDF layout inside a paragraph:
// lines join with a space, or with nothing between two CJK characters, where
// a space would split a word.
func joinLines(p string) string {
	lines := strings.Split(p, "\n")
	var b strings.Builder
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if i > 0 && b.Len() > 0 {
			last, _ := utf8.DecodeLastRuneInString(b.String())
			first, _ := utf8.DecodeRuneInString(l)
			if !text.IsCJK(last) || !text.IsCJK(first) {
				b.WriteByte(' ')
			}
		}
		b.WriteString(l)
	}
	return b.String()
}
