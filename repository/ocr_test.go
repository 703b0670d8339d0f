package repository

import (
	"testing"

	"github.com/ragent-go/ragent/service"
)

// A document is marked OCR by the chunks ingestion gives it, not by their
// sections: a chunk read by OCR marks it, a text chunk whose section ends
// in "(OCR)" does not, and a later delivery without OCR'd chunks (OCR
// turned off, a reindex) clears the mark. Reading one document and listing
// them agree.
func TestDocumentOCRFollowsItsChunks(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	scan := seedDoc(t, s, kb, "scan")
	text := seedDoc(t, s, kb, "text")

	page := chunk(0, "page one text", unit(4, 0), "page")
	page.Section, page.OCR = "Page 1"+service.OCRSectionSuffix, true
	heading := chunk(0, "Scanner setup (OCR)", unit(4, 1), "scanner")
	heading.Section = "Scanner setup (OCR)"
	if err := s.ReplaceChunks(ctx, scan.ID, 1, docSpace(t, s, scan.ID), []service.Chunk{chunk(1, "a text page", unit(4, 2), "text"), page}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceChunks(ctx, text.ID, 1, docSpace(t, s, text.ID), []service.Chunk{heading}); err != nil {
		t.Fatal(err)
	}
	want := map[service.ID]bool{scan.ID: true, text.ID: false}
	check := func(when string) {
		t.Helper()
		for id, ocr := range want {
			d, err := s.Document(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if d.OCR != ocr {
				t.Errorf("%s: document %s OCR %v, want %v", when, id, d.OCR, ocr)
			}
		}
		list, err := s.Documents(ctx, kb.ID, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != len(want) {
			t.Fatalf("%s: %d documents listed", when, len(list))
		}
		for _, d := range list {
			if d.OCR != want[d.ID] {
				t.Errorf("%s: listed document %s OCR %v, want %v", when, d.ID, d.OCR, want[d.ID])
			}
		}
	}
	check("first delivery")

	again := chunk(0, "page one typed", unit(4, 0), "page")
	again.Section = "Page 1"
	if err := s.ReplaceChunks(ctx, scan.ID, 1, docSpace(t, s, scan.ID), []service.Chunk{again}); err != nil {
		t.Fatal(err)
	}
	want[scan.ID] = false
	check("delivery without OCR")
}
