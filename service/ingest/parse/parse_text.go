package parse

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"
)

var (
	bomUTF8    = []byte{0xEF, 0xBB, 0xBF}
	bomUTF16LE = []byte{0xFF, 0xFE}
	bomUTF16BE = []byte{0xFE, 0xFF}
)

// decodeText returns b as UTF-8. It honours a UTF-8 or UTF-16 byte-order
// mark; without one, valid UTF-8 is taken as is, and otherwise GB18030 (a
// superset of GBK and GB2312, the encodings Chinese Windows still writes) is
// tried and kept only if it decodes without a single invalid sequence.
func decodeText(b []byte) (string, error) {
	switch {
	case bytes.HasPrefix(b, bomUTF8):
		return cleanText(string(b[len(bomUTF8):])), nil
	case bytes.HasPrefix(b, bomUTF16LE):
		return decodeWith(unicode.UTF16(unicode.LittleEndian, unicode.ExpectBOM), b, "UTF-16")
	case bytes.HasPrefix(b, bomUTF16BE):
		return decodeWith(unicode.UTF16(unicode.BigEndian, unicode.ExpectBOM), b, "UTF-16")
	case utf8.Valid(b):
		return cleanText(string(b)), nil
	}
	if s, ok := decodeGB18030(b); ok {
		return cleanText(s), nil
	}
	return "", fmt.Errorf("%w: the text is neither UTF-8, UTF-16 nor GB18030/GBK", ErrUnsupported)
}

func decodeWith(enc encoding.Encoding, b []byte, name string) (string, error) {
	out, err := enc.NewDecoder().Bytes(b)
	if err != nil {
		return "", fmt.Errorf("%w: invalid %s text: %v", ErrCorrupt, name, err)
	}
	return cleanText(string(out)), nil
}

// decodeGB18030 decodes b strictly: x/text's decoder substitutes U+FFFD for
// invalid input, so any replacement character that was not encoded in the
// input (GB18030 can encode U+FFFD as 84 31 A4 37) means it is not GB18030.
func decodeGB18030(b []byte) (string, bool) {
	out, err := simplifiedchinese.GB18030.NewDecoder().Bytes(b)
	if err != nil {
		return "", false
	}
	if bytes.Contains(out, []byte("\uFFFD")) && !bytes.Contains(b, []byte{0x84, 0x31, 0xA4, 0x37}) {
		return "", false
	}
	return string(out), true
}

// cleanText normalises line endings and drops NULs and other C0 controls
// that would only confuse the tokenizer and Postgres (which rejects NUL).
func cleanText(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7F || r == '\uFEFF' {
			return -1
		}
		return r
	}, s)
}

// readText reads a whole text file within limits and decodes it to UTF-8.
func readText(r io.ReaderAt, size int64, limits Limits) (string, error) {
	b, err := readAllLimited(r, size, limits.MaxDecompressedBytes)
	if err != nil {
		return "", err
	}
	return decodeText(b)
}

// textParser is the parser of a text format: the whole file, decoded, is
// handed to parse.
func textParser(parse func(*Text, string)) parser {
	return func(_ context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
		s, err := readText(r, size, limits)
		if err != nil {
			return nil, err
		}
		doc := newText(limits)
		parse(doc, s)
		return doc, nil
	}
}

// parsePlain makes one paragraph of each run of non-blank lines.
func parsePlain(doc *Text, s string) {
	for _, p := range splitParagraphs(s) {
		doc.add(Paragraph, 0, p)
	}
}

func splitParagraphs(s string) []string {
	var out []string
	var cur []string
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			if len(cur) > 0 {
				out = append(out, strings.Join(cur, "\n"))
				cur = cur[:0]
			}
			continue
		}
		cur = append(cur, strings.TrimRight(line, " \t"))
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

var (
	mdHeading   = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	mdFence     = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	mdList      = regexp.MustCompile(`^\s*(?:[-*+]|\d{1,9}[.)])[ \t]+(.*)$`)
	mdRule      = regexp.MustCompile(`^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$`)
	mdSetext1   = regexp.MustCompile(`^ {0,3}=+[ \t]*$`)
	mdSetext2   = regexp.MustCompile(`^ {0,3}-+[ \t]*$`)
	mdTableSep  = regexp.MustCompile(`^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)
	mdImage     = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	mdLink      = regexp.MustCompile(`\[([^\]]+)\]\([^)]*\)`)
	mdEmphasis  = regexp.MustCompile("(\\*\\*|__|~~|`)")
	mdQuoteMark = regexp.MustCompile(`^\s*(?:>\s?)+`)
)

// parseMarkdown reads the CommonMark structures a chunker cares about —
// ATX and setext headings, fenced code, list items, pipe tables, paragraphs —
// and strips inline markup that carries no meaning for search.
func parseMarkdown(doc *Text, s string) {
	lines := strings.Split(s, "\n")
	var para []string
	var item []string
	flush := func() {
		if len(item) > 0 {
			doc.add(ListItem, 0, mdInline(strings.Join(item, " ")))
			item = nil
		}
		if len(para) > 0 {
			doc.add(Paragraph, 0, mdInline(strings.Join(para, "\n")))
			para = nil
		}
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		switch {
		case mdFence.MatchString(line):
			flush()
			fence := mdFence.FindStringSubmatch(line)[1]
			var code []string
			for i++; i < len(lines); i++ {
				if strings.HasPrefix(strings.TrimSpace(lines[i]), fence) {
					break
				}
				code = append(code, lines[i])
			}
			doc.add(Code, 0, strings.Join(code, "\n"))
		case trimmed == "":
			flush()
		case mdHeading.MatchString(line):
			flush()
			m := mdHeading.FindStringSubmatch(line)
			doc.add(Heading, len(m[1]), mdInline(m[2]))
		case len(para) == 1 && len(item) == 0 && (mdSetext1.MatchString(line) || mdSetext2.MatchString(line)):
			level := 1
			if mdSetext2.MatchString(line) {
				level = 2
			}
			doc.add(Heading, level, mdInline(para[0]))
			para = nil
		case mdRule.MatchString(line):
			flush()
		case strings.Contains(trimmed, "|") && i+1 < len(lines) && mdTableSep.MatchString(lines[i+1]) && strings.Contains(lines[i+1], "-"):
			flush()
			header := mdCells(line)
			rows := 0
			for i += 2; i < len(lines) && strings.Contains(lines[i], "|") && strings.TrimSpace(lines[i]) != ""; i++ {
				doc.add(TableRow, 0, tableRow(header, mdCells(lines[i])))
				rows++
			}
			i--
			if rows == 0 {
				doc.add(TableRow, 0, strings.Join(header, " | "))
			}
		case mdList.MatchString(line):
			flush()
			item = []string{mdList.FindStringSubmatch(line)[1]}
		case len(item) > 0 && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")):
			item = append(item, trimmed) // a continuation line of the list item
		default:
			if len(item) > 0 {
				flush()
			}
			para = append(para, mdQuoteMark.ReplaceAllString(strings.TrimRight(line, " \t"), ""))
		}
	}
	flush()
}

func mdInline(s string) string {
	s = mdImage.ReplaceAllString(s, "$1")
	s = mdLink.ReplaceAllString(s, "$1")
	return mdEmphasis.ReplaceAllString(s, "")
}

func mdCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = mdInline(strings.TrimSpace(c))
	}
	return cells
}

// tableRow renders a row so that it stands alone in a chunk: each value is
// labelled with its column header ("name: Alice; age: 30"), which is what
// lets a search for "Alice's age" find a row far below the header. A table
// without a header row (nil header) has its values joined by joinCells.
func tableRow(header, cells []string) string {
	if header == nil {
		return joinCells(cells)
	}
	var b strings.Builder
	for i, c := range cells {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if i < len(header) && strings.TrimSpace(header[i]) != "" {
			b.WriteString(strings.TrimSpace(header[i]))
			b.WriteString(": ")
		}
		b.WriteString(c)
	}
	return b.String()
}

// looksLikeHeader reports whether a first row names columns rather than
// holding data: every cell filled and none a number.
func looksLikeHeader(cells []string) bool {
	filled := 0
	for _, c := range cells {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		filled++
		if isNumber(c) {
			return false
		}
	}
	return filled > 0 && filled == len(cells)
}

func isNumber(s string) bool {
	digits := 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case strings.ContainsRune("+-.,%$€¥ eE", r):
		default:
			return false
		}
	}
	return digits > 0
}

// parseCSV reads comma-, semicolon- or tab-separated values in any of the
// text encodings decodeText knows (Excel in China saves CSV as GBK).
func parseCSV(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
	s, err := readText(r, size, limits)
	if err != nil {
		return nil, err
	}
	cr := csv.NewReader(strings.NewReader(s))
	cr.Comma = csvDelimiter(s)
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = false
	doc := newText(limits)
	var header []string
	var rows int64
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: csv: %v", ErrCorrupt, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if rows++; rows > limits.MaxRows {
			return nil, fmt.Errorf("%w: more than %d rows", ErrTooLarge, limits.MaxRows)
		}
		if header == nil && rows == 1 && looksLikeHeader(rec) {
			header = rec
			continue
		}
		doc.add(TableRow, 0, tableRow(header, rec))
		if err := doc.textErr(); err != nil {
			return nil, err
		}
	}
	if len(doc.Blocks) == 0 && header != nil {
		doc.add(TableRow, 0, joinCells(header))
	}
	return doc, nil
}

// tableRows turns the rows of one table into blocks: a first row that looks
// like a header is kept to label the values of the rows after it.
type tableRows struct {
	header []string
	n      int // rows seen
}

// add adds row to doc, or keeps it as the header.
func (t *tableRows) add(doc *Text, row []string) {
	t.n++
	if t.n == 1 && looksLikeHeader(row) {
		t.header = row
		return
	}
	doc.add(TableRow, 0, tableRow(t.header, row))
}

// end adds the header as a row of its own when it was the table's only row.
func (t *tableRows) end(doc *Text) {
	if t.n == 1 && t.header != nil {
		doc.add(TableRow, 0, joinCells(t.header)) // a table that is only a header
	}
}

func joinCells(cells []string) string {
	var parts []string
	for _, c := range cells {
		if c = strings.TrimSpace(c); c != "" {
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, " | ")
}

// csvDelimiter picks the separator that occurs most in the first line.
func csvDelimiter(s string) rune {
	first, _, _ := strings.Cut(s, "\n")
	best, bestN := ',', strings.Count(first, ",")
	for _, d := range []rune{';', '\t'} {
		if n := strings.Count(first, string(d)); n > bestN {
			best, bestN = d, n
		}
	}
	return best
}
