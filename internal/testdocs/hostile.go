package testdocs

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// Hostile documents: small files crafted to make a parser loop forever or to
// expand into far more text than their size suggests. Each is built in
// memory, streamed where it is large, so tests need no fixtures.

// PDFKidsLoop is a PDF whose page tree lists itself as its only kid: a
// parser that descends by /Count never reaches a page (the 244-byte file of
// the hardening issue).
func PDFKidsLoop(t testing.TB) []byte {
	t.Helper()
	return PDFObjects(t,
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R] /Count 1 >>",
	)
}

// PDFParentLoop is a PDF with one well-formed page whose /Parent chain loops
// (page → pages 2 → pages 5 → pages 2 …) and that has no /Resources, so a
// parser looking up inherited resources walks the chain forever.
func PDFParentLoop(t testing.TB) []byte {
	t.Helper()
	content := "BT /F1 12 Tf 72 720 Td (Parent loop) Tj ET"
	return PDFObjects(t,
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 /Parent 5 0 R >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content),
		"<< /Type /Pages /Kids [] /Count 0 /Parent 2 0 R >>",
	)
}

// zipStream builds a zip archive whose entries are written by functions, so
// that an entry of hundreds of megabytes never exists in memory whole.
func zipStream(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.Create(e.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.write(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zipEntry struct {
	name  string
	write func(io.Writer) error
}

func fixed(name, content string) zipEntry {
	return zipEntry{name, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }}
}

// repeated writes head, then unit n times, then tail, in batches.
func repeated(name, head, unit string, n int, tail string) zipEntry {
	return zipEntry{name, func(w io.Writer) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		per := max(1, (1<<20)/max(1, len(unit)))
		batch := strings.Repeat(unit, per)
		for left := n; left > 0; left -= per {
			s := batch
			if left < per {
				s = strings.Repeat(unit, left)
			}
			if _, err := io.WriteString(w, s); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, tail)
		return err
	}}
}

// DocxRepeated is a Word document of n copies of one paragraph of text.
// Repeated XML deflates about a thousand to one, so a few hundred kilobytes
// hold hundreds of megabytes of text (the 708 KB DOCX of the hardening issue
// became 105,756 chunks).
func DocxRepeated(t testing.TB, text string, n int) []byte {
	t.Helper()
	return zipStream(t,
		fixed("[Content_Types].xml", `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>`),
		repeated("word/document.xml", `<?xml version="1.0" encoding="UTF-8"?><w:document `+WordNS+`><w:body>`,
			DocxParagraph("", text), n, `</w:body></w:document>`),
	)
}

// PptxRepeated is a one-slide presentation of n copies of one paragraph.
func PptxRepeated(t testing.TB, text string, n int) []byte {
	t.Helper()
	return zipStream(t,
		fixed("[Content_Types].xml", `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>`),
		fixed("ppt/presentation.xml", `<?xml version="1.0"?><p:presentation `+slideNS+`/>`),
		repeated("ppt/slides/slide1.xml", `<?xml version="1.0"?><p:sld `+slideNS+`><p:cSld><p:spTree><p:sp><p:txBody>`,
			`<a:p><a:r><a:t>`+text+`</a:t></a:r></a:p>`, n, `</p:txBody></p:sp></p:spTree></p:cSld></p:sld>`),
	)
}

// XlsxSharedStringsBomb is a workbook whose shared-string table holds one
// string of text repeated reps times, referenced by every cell of a
// rows × 2 sheet: each row expands to the whole string twice.
func XlsxSharedStringsBomb(t testing.TB, text string, reps, rows int) []byte {
	t.Helper()
	const ns = `xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"`
	const rel = `xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"`
	return zipStream(t,
		fixed("[Content_Types].xml", `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">`+
			`<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>`+
			`<Default Extension="xml" ContentType="application/xml"/>`+
			`<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>`+
			`<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>`+
			`<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>`),
		fixed("_rels/.rels", `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">`+
			`<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>`),
		fixed("xl/workbook.xml", `<?xml version="1.0" encoding="UTF-8"?><workbook `+ns+` `+rel+`><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>`),
		fixed("xl/_rels/workbook.xml.rels", `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">`+
			`<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/>`+
			`<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="sharedStrings.xml"/></Relationships>`),
		repeated("xl/sharedStrings.xml", `<?xml version="1.0" encoding="UTF-8"?><sst `+ns+` count="1" uniqueCount="1"><si><t>`,
			text+" ", reps, `</t></si></sst>`),
		zipEntry{"xl/worksheets/sheet1.xml", func(w io.Writer) error {
			if _, err := io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><worksheet `+ns+`><sheetData>`); err != nil {
				return err
			}
			for r := 1; r <= rows; r++ {
				if _, err := fmt.Fprintf(w, `<row r="%d"><c r="A%d" t="s"><v>0</v></c><c r="B%d" t="s"><v>0</v></c></row>`, r, r, r); err != nil {
					return err
				}
			}
			_, err := io.WriteString(w, `</sheetData></worksheet>`)
			return err
		}},
	)
}

// LongWord is a word of n pseudo-random lower-case letters. Random letters
// matter: Postgres compresses a run of one letter so well that it fits in
// an index row, while a real 40,000-letter token does not.
func LongWord(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = 'a' + byte(x%26)
	}
	return string(b)
}
