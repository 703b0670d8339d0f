// Package testdocs builds small documents of every supported format for tests:
// Word, PowerPoint, Excel and PDF files made in memory, so that the parser
// tests and the end-to-end ingestion tests share one set of generators
// instead of copies that drift apart.
//
// The OOXML files carry only the parts the ingest parser reads, plus a
// content-types part so they look like what Office writes. Text is inserted
// verbatim into XML and PDF strings: callers pass plain text without markup
// characters (or markup on purpose).
package testdocs

import (
	"archive/zip"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/xuri/excelize/v2"
)

// WordNS declares the WordprocessingML namespace as the prefix w, for tests
// that write word/document.xml themselves.
const WordNS = `xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"`

const slideNS = `xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"`

// Zip builds a zip archive of name → content entries, in the given order.
func Zip(t testing.TB, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.Create(e[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// DocxParagraph returns one Word paragraph of text with the paragraph style
// id style ("" for none, "Heading1", "Title", "MyChapter", ...).
func DocxParagraph(style, text string) string {
	ppr := ""
	if style != "" {
		ppr = `<w:pPr><w:pStyle w:val="` + style + `"/></w:pPr>`
	}
	return `<w:p>` + ppr + `<w:r><w:t xml:space="preserve">` + text + `</w:t></w:r></w:p>`
}

// DocxTable returns a Word table with one row per entry of rows, each cell a
// plain paragraph.
func DocxTable(rows ...[]string) string {
	var b strings.Builder
	b.WriteString(`<w:tbl>`)
	for _, r := range rows {
		b.WriteString(`<w:tr>`)
		for _, c := range r {
			b.WriteString(`<w:tc>` + DocxParagraph("", c) + `</w:tc>`)
		}
		b.WriteString(`</w:tr>`)
	}
	b.WriteString(`</w:tbl>`)
	return b.String()
}

// Docx builds a minimal Word document whose body is the given XML (built
// from DocxParagraph and DocxTable). Its styles part defines one custom
// style, "MyChapter", named "heading 2", so tests can check that headings
// are recognised by style name as well as by the built-in ids.
func Docx(t testing.TB, body string) []byte {
	t.Helper()
	return Zip(t,
		[2]string{"[Content_Types].xml", `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">` +
			`<Default Extension="xml" ContentType="application/xml"/>` +
			`<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>`},
		[2]string{"word/styles.xml", `<?xml version="1.0" encoding="UTF-8"?><w:styles ` + WordNS + `>` +
			`<w:style w:type="paragraph" w:styleId="MyChapter"><w:name w:val="heading 2"/></w:style></w:styles>`},
		[2]string{"word/document.xml", `<?xml version="1.0" encoding="UTF-8"?><w:document ` + WordNS + `><w:body>` + body + `</w:body></w:document>`},
	)
}

// PptxSlide returns the XML of one slide: a title placeholder (left out when
// title is empty) and a body placeholder with one paragraph per entry of
// paras.
func PptxSlide(title string, paras ...string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0"?><p:sld ` + slideNS + `><p:cSld><p:spTree>`)
	if title != "" {
		b.WriteString(`<p:sp><p:nvSpPr><p:nvPr><p:ph type="title"/></p:nvPr></p:nvSpPr><p:txBody><a:p><a:r><a:t>` + title + `</a:t></a:r></a:p></p:txBody></p:sp>`)
	}
	b.WriteString(`<p:sp><p:nvSpPr><p:nvPr><p:ph idx="1"/></p:nvPr></p:nvSpPr><p:txBody>`)
	for _, p := range paras {
		b.WriteString(`<a:p><a:r><a:t>` + p + `</a:t></a:r></a:p>`)
	}
	b.WriteString(`</p:txBody></p:sp></p:spTree></p:cSld></p:sld>`)
	return b.String()
}

// Pptx builds a presentation of the given slides (from PptxSlide), numbered
// from 1 in order.
func Pptx(t testing.TB, slides ...string) []byte {
	t.Helper()
	entries := [][2]string{
		{"[Content_Types].xml", `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>`},
		{"ppt/presentation.xml", `<?xml version="1.0"?><p:presentation ` + slideNS + `/>`},
	}
	// Written in reverse so the parser must order slides by number, not by
	// their place in the archive.
	for i := len(slides) - 1; i >= 0; i-- {
		entries = append(entries, [2]string{fmt.Sprintf("ppt/slides/slide%d.xml", i+1), slides[i]})
	}
	return Zip(t, entries...)
}

// Xlsx builds a workbook with excelize: a sheet for each name in order, in
// that order, holding its rows from sheets starting at A1. The names come
// separately because a map has no order and the parser keeps the sheets'.
func Xlsx(t testing.TB, sheets map[string][][]any, order ...string) []byte {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	for i, name := range order {
		if i == 0 {
			if err := f.SetSheetName("Sheet1", name); err != nil {
				t.Fatal(err)
			}
		} else if _, err := f.NewSheet(name); err != nil {
			t.Fatal(err)
		}
		for r, row := range sheets[name] {
			cell, err := excelize.CoordinatesToCellName(1, r+1)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.SetSheetRow(name, cell, &row); err != nil {
				t.Fatal(err)
			}
		}
	}
	buf, err := f.WriteToBuffer()
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// PDF writes a minimal valid PDF with one page per entry of pages, each
// showing its lines in Helvetica, with a correct xref table.
func PDF(t testing.TB, pages ...[]string) []byte {
	t.Helper()
	// 1: catalog, 2: pages, 3: font, then per page: page object and content stream.
	kids := make([]string, len(pages))
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 4+2*i)
	}
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
	}
	for i, lines := range pages {
		var content strings.Builder
		content.WriteString("BT /F1 12 Tf 72 720 Td 14 TL\n")
		for _, l := range lines {
			fmt.Fprintf(&content, "(%s) Tj T*\n", l)
		}
		content.WriteString("ET")
		objs = append(objs,
			fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 5+2*i),
			fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", content.Len(), content.String()),
		)
	}
	return PDFObjects(t, objs...)
}

// PDFObjects writes a PDF whose objects are objs, numbered from 1 in order,
// with a correct xref table and object 1 as the catalog. Tests use it to
// build malformed page trees on purpose.
func PDFObjects(t testing.TB, objs ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}
