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

// Migration 0025 marks the documents stored before it whose current
// generation has a chunk the chunker labelled as an OCR'd page, and no
// other: not one whose heading ends in "(OCR)", not one whose OCR'd chunks
// belong to an earlier generation.
func TestMigration0025BackfillsOCR(t *testing.T) {
	s := upgraded(t, "0025",
		`INSERT INTO knowledge_bases (id, name, embedding_model, embedding_dim) VALUES (1, 'old', 'm', 4)`,
		`INSERT INTO document_blobs (sha256, bytes, size) VALUES ('aa', 'x', 1), ('bb', 'y', 1), ('cc', 'z', 1)`,
		`INSERT INTO documents (id, kb_id, name, mime, size, sha256, status, chunk_count, generation) VALUES
			(2, 1, 'scan.pdf', 'application/pdf', 1, 'aa', 'ready', 2, 1),
			(3, 1, 'scanner.md', 'text/markdown', 1, 'bb', 'ready', 1, 1),
			(4, 1, 'retyped.pdf', 'application/pdf', 1, 'cc', 'ready', 1, 2)`,
		`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, section, token_count, term_count, embedding_dim) VALUES
			(10, 2, 1, 1, 0, 'cover', 'Report', 1, 1, 4),
			(11, 2, 1, 1, 1, 'page two', 'Report > Page 2 (OCR)', 2, 2, 4),
			(12, 3, 1, 1, 0, 'setup', 'Scanner setup (OCR)', 1, 1, 4),
			(13, 4, 1, 1, 0, 'old scan', 'Page 1 (OCR)', 2, 2, 4),
			(14, 4, 1, 2, 0, 'typed', 'Page 1', 1, 1, 4)`)
	ctx := t.Context()
	for id, want := range map[service.ID]bool{2: true, 3: false, 4: false} {
		d, err := s.Document(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.OCR != want {
			t.Errorf("document %s (%s) OCR %v, want %v", id, d.Name, d.OCR, want)
		}
	}
}
