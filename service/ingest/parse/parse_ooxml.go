package parse

import (
	"archive/zip"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// zipArchive is a zip container opened with the limits checked up front
// (entry count, declared sizes, encryption) and enforced again while
// reading, since declared sizes in a hostile file can lie.
type zipArchive struct {
	files  map[string]*zip.File
	names  []string
	budget int64 // bytes that may still be decompressed
}

func openZip(r io.ReaderAt, size int64, limits Limits) (*zipArchive, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: not a readable zip container: %v", ErrCorrupt, err)
	}
	if int64(len(zr.File)) > limits.MaxZipEntries {
		return nil, fmt.Errorf("%w: %d zip entries exceed the limit of %d", ErrTooLarge, len(zr.File), limits.MaxZipEntries)
	}
	a := &zipArchive{files: make(map[string]*zip.File, len(zr.File)), budget: limits.MaxDecompressedBytes}
	var declared uint64
	for _, f := range zr.File {
		if f.Flags&0x1 != 0 {
			return nil, fmt.Errorf("%w: the zip entry %q is encrypted", ErrEncrypted, f.Name)
		}
		declared += f.UncompressedSize64
		if declared > uint64(limits.MaxDecompressedBytes) {
			return nil, fmt.Errorf("%w: the content decompresses to more than %d bytes", ErrTooLarge, limits.MaxDecompressedBytes)
		}
		a.files[f.Name] = f
		a.names = append(a.names, f.Name)
	}
	return a, nil
}

// open returns a reader of the named entry that fails with ErrTooLarge once
// the archive's decompression budget is spent.
func (a *zipArchive) open(name string) (io.ReadCloser, error) {
	f, ok := a.files[name]
	if !ok {
		return nil, fmt.Errorf("%w: the entry %q is missing", ErrCorrupt, name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: zip entry %q: %v", ErrCorrupt, name, err)
	}
	return &budgetReader{rc: rc, a: a}, nil
}

type budgetReader struct {
	rc io.ReadCloser
	a  *zipArchive
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.a.budget <= 0 {
		// Probe one byte: reaching the end exactly at the limit is fine.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: the content decompresses to more than the limit", ErrTooLarge)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.a.budget {
		p = p[:b.a.budget]
	}
	n, err := b.rc.Read(p)
	b.a.budget -= int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return n, err
}

func (b *budgetReader) Close() error { return b.rc.Close() }

// xmlTokens streams the tokens of a zip entry to fn, stopping at the first
// error fn returns or when ctx ends.
func (a *zipArchive) xmlTokens(ctx context.Context, name string, fn func(xml.Token) error) error {
	rc, err := a.open(name)
	if err != nil {
		return err
	}
	defer rc.Close()
	d := xml.NewDecoder(rc)
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if IsPermanent(err) {
				return err
			}
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
		}
		if err := fn(tok); err != nil {
			return err
		}
	}
}

func attr(se xml.StartElement, local string) string {
	for _, a := range se.Attr {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}

// ---- docx ----

// parseDOCX reads word/document.xml: paragraphs, with headings recognised
// by style (built-in "Heading1".."Heading9" and "Title", localised styles
// whose id is just the level such as Chinese Word's "1", and any style whose
// name or outline level says heading), numbered paragraphs as list items,
// and tables as rows.
func parseDOCX(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
	a, err := openZip(r, size, limits)
	if err != nil {
		return nil, err
	}
	if _, ok := a.files["word/document.xml"]; !ok {
		return nil, fmt.Errorf("%w: docx without word/document.xml", ErrCorrupt)
	}
	styles := map[string]int{}
	if _, ok := a.files["word/styles.xml"]; ok {
		if styles, err = docxStyles(ctx, a); err != nil {
			return nil, err
		}
	}
	p := &docxParser{doc: newText(limits), styles: styles}
	if err := a.xmlTokens(ctx, "word/document.xml", p.token); err != nil {
		return nil, err
	}
	return p.doc, nil
}

var headingName = regexp.MustCompile(`(?i)^heading\s*([1-9])$`)

// docxStyles maps paragraph style ids to heading levels from styles.xml.
func docxStyles(ctx context.Context, a *zipArchive) (map[string]int, error) {
	levels := map[string]int{}
	var id string
	err := a.xmlTokens(ctx, "word/styles.xml", func(tok xml.Token) error {
		se, ok := tok.(xml.StartElement)
		if !ok {
			return nil
		}
		switch se.Name.Local {
		case "style":
			id = attr(se, "styleId")
		case "name":
			name := attr(se, "val")
			if m := headingName.FindStringSubmatch(name); m != nil {
				levels[id] = int(m[1][0] - '0')
			} else if strings.EqualFold(name, "title") {
				levels[id] = 1
			}
		case "outlineLvl":
			if n, err := strconv.Atoi(attr(se, "val")); err == nil && n < 9 && id != "" {
				if _, set := levels[id]; !set {
					levels[id] = n + 1
				}
			}
		}
		return nil
	})
	return levels, err
}

type docxParser struct {
	doc    *Text
	styles map[string]int

	para     strings.Builder
	inText   bool
	inRun    bool
	level    int // heading level of the current paragraph, 0 if none
	numbered bool
	tables   []*docxTable
}

type docxTable struct {
	tableRows
	row  []string
	cell strings.Builder
}

func (p *docxParser) token(tok xml.Token) error {
	switch t := tok.(type) {
	case xml.StartElement:
		switch t.Name.Local {
		case "p":
			p.para.Reset()
			p.level, p.numbered = 0, false
		case "pStyle":
			p.level = styleLevel(attr(t, "val"), p.styles)
		case "outlineLvl":
			if n, err := strconv.Atoi(attr(t, "val")); err == nil && n < 9 && p.level == 0 {
				p.level = n + 1
			}
		case "numPr":
			p.numbered = true
		case "r":
			p.inRun = true
		case "t":
			p.inText = true
		case "tab":
			if p.inRun {
				p.para.WriteByte('\t')
			}
		case "br", "cr":
			if p.inRun {
				p.para.WriteByte('\n')
			}
		case "tbl":
			p.tables = append(p.tables, &docxTable{})
		case "tr":
			if t := p.table(); t != nil {
				t.row = t.row[:0]
			}
		case "tc":
			if t := p.table(); t != nil {
				t.cell.Reset()
			}
		}
	case xml.CharData:
		if p.inText {
			p.para.Write(t)
			// A run of repeated text can expand far past the cap within
			// one paragraph: check before it is ever added.
			if err := p.doc.fits(p.para.Len()); err != nil {
				return err
			}
		}
	case xml.EndElement:
		switch t.Name.Local {
		case "t":
			p.inText = false
		case "r":
			p.inRun = false
		case "p":
			p.endParagraph()
		case "tc":
			if t := p.table(); t != nil {
				if err := p.doc.fits(t.cell.Len()); err != nil {
					return err
				}
				t.row = append(t.row, strings.TrimSpace(t.cell.String()))
			}
		case "tr":
			p.endRow()
		case "tbl":
			if t := p.table(); t != nil {
				if len(p.tables) == 1 {
					t.end(p.doc)
				}
				p.tables = p.tables[:len(p.tables)-1]
			}
		}
	}
	return p.doc.textErr()
}

func (p *docxParser) table() *docxTable {
	if len(p.tables) == 0 {
		return nil
	}
	return p.tables[len(p.tables)-1]
}

func (p *docxParser) endParagraph() {
	text := p.para.String()
	p.para.Reset()
	if t := p.table(); t != nil {
		if strings.TrimSpace(text) != "" {
			if t.cell.Len() > 0 {
				t.cell.WriteByte('\n')
			}
			t.cell.WriteString(strings.TrimSpace(text))
		}
		return
	}
	switch {
	case p.level > 0:
		p.doc.add(Heading, p.level, text)
	case p.numbered:
		p.doc.add(ListItem, 0, text)
	default:
		p.doc.add(Paragraph, 0, text)
	}
}

// endRow emits a row of a top-level table; a nested table's row becomes
// text of the enclosing cell, since a block cannot hold a table.
func (p *docxParser) endRow() {
	t := p.table()
	if t == nil {
		return
	}
	row := slices.Clone(t.row)
	if len(p.tables) > 1 {
		outer := p.tables[len(p.tables)-2]
		if outer.cell.Len() > 0 {
			outer.cell.WriteByte('\n')
		}
		outer.cell.WriteString(joinCells(row))
		return
	}
	t.add(p.doc, row)
}

var builtinHeading = regexp.MustCompile(`(?i)^(?:heading\s*)?([1-9])$`)

func styleLevel(id string, styles map[string]int) int {
	if l, ok := styles[id]; ok {
		return l
	}
	if m := builtinHeading.FindStringSubmatch(id); m != nil {
		return int(m[1][0] - '0')
	}
	if strings.EqualFold(id, "title") {
		return 1
	}
	return 0
}

// ---- pptx ----

var slideName = regexp.MustCompile(`^ppt/slides/slide(\d+)\.xml$`)

// parsePPTX reads the slides in order; each slide starts with a heading
// (its title placeholder, or "Slide N" when it has none) so that chunks keep
// the slide they came from as their section.
func parsePPTX(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
	a, err := openZip(r, size, limits)
	if err != nil {
		return nil, err
	}
	type slide struct {
		n    int
		name string
	}
	var slides []slide
	for _, name := range a.names {
		if m := slideName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			slides = append(slides, slide{n, name})
		}
	}
	if len(slides) == 0 {
		if _, ok := a.files["ppt/presentation.xml"]; !ok {
			return nil, fmt.Errorf("%w: pptx without ppt/presentation.xml", ErrCorrupt)
		}
	}
	slices.SortFunc(slides, func(x, y slide) int { return x.n - y.n })
	doc := newText(limits)
	for i, s := range slides {
		// A slide's blocks come after its title, known only at its end;
		// they are collected against what is left of the text cap.
		// (Merging them checks the document's cap again, exactly.)
		p := &pptxSlide{blocks: Text{max: max(1, limits.MaxTextBytes-doc.size)}}
		if err := a.xmlTokens(ctx, s.name, p.token); err != nil {
			if p.blocks.full {
				doc.full = true
				return nil, doc.textErr()
			}
			return nil, err
		}
		title := strings.TrimSpace(strings.Join(p.title, " "))
		if title == "" {
			title = fmt.Sprintf("Slide %d", i+1)
		}
		doc.add(Heading, 1, title)
		for _, b := range p.blocks.Blocks {
			doc.add(b.Kind, b.Level, b.Text)
		}
		if err := doc.textErr(); err != nil {
			return nil, err
		}
	}
	if !hasContent(doc) {
		return &Text{}, nil // only "Slide N" headings: nothing to search
	}
	return doc, nil
}

type pptxSlide struct {
	blocks  Text
	title   []string
	isTitle bool // the current shape is the title placeholder
	inText  bool
	para    strings.Builder
	inCell  bool
	cell    strings.Builder
	row     []string
	table   tableRows
}

func (s *pptxSlide) token(tok xml.Token) error {
	switch t := tok.(type) {
	case xml.StartElement:
		switch t.Name.Local {
		case "sp":
			s.isTitle = false
		case "ph":
			typ := attr(t, "type")
			s.isTitle = typ == "title" || typ == "ctrTitle"
		case "p":
			s.para.Reset()
		case "t":
			s.inText = true
		case "br":
			s.para.WriteByte('\n')
		case "tbl":
			s.table = tableRows{}
		case "tr":
			s.row = s.row[:0]
		case "tc":
			s.inCell = true
			s.cell.Reset()
		}
	case xml.CharData:
		if s.inText {
			s.para.Write(t)
			if err := s.blocks.fits(s.para.Len() + s.cell.Len()); err != nil {
				return err
			}
		}
	case xml.EndElement:
		switch t.Name.Local {
		case "t":
			s.inText = false
		case "p":
			text := strings.TrimSpace(s.para.String())
			switch {
			case text == "":
			case s.inCell:
				if s.cell.Len() > 0 {
					s.cell.WriteByte('\n')
				}
				s.cell.WriteString(text)
			case s.isTitle:
				s.title = append(s.title, text)
			default:
				s.blocks.add(Paragraph, 0, text)
			}
		case "sp":
			s.isTitle = false
		case "tc":
			s.inCell = false
			s.row = append(s.row, s.cell.String())
		case "tbl":
			s.table.end(&s.blocks)
		case "tr":
			s.table.add(&s.blocks, slices.Clone(s.row))
		}
	}
	return s.blocks.textErr()
}
