package parse

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// ChunkOptions size the chunks, in text.CountTokens tokens.
type ChunkOptions struct {
	TargetTokens  int // a chunk's maximum size; 0 means the default
	OverlapTokens int // trailing sentences of a chunk repeated at the start of the next one in the same section
	MaxChunks     int // Split stops after MaxChunks+1 chunks, enough to tell the cap was passed; 0 means no cap
}

// DefaultChunkOptions suit embedding models with 512-token windows and
// leave room for several sources in a chat prompt.
func DefaultChunkOptions() ChunkOptions {
	return ChunkOptions{TargetTokens: 512, OverlapTokens: 64}
}

// Chunk is one retrievable piece of a document.
type Chunk struct {
	Ordinal    int    // position in the document, from 0
	Content    string // the text, starting with the section's headings in a section's first chunk
	Section    string // the heading path, e.g. "Install > Linux"; empty before the first heading
	TokenCount int    // text.CountTokens(Content)
	OCR        bool   // the text was read from an image by OCR
}

// Split cuts doc into chunks by structure. A heading always starts a new
// chunk and extends the section path; paragraphs, list items, table rows and
// code blocks are packed whole up to TargetTokens; a block too big for one
// chunk is cut between sentences (Chinese 。！？； included), a sentence too
// big between words or characters. Consecutive chunks of one section share
// up to OverlapTokens of trailing sentences, so a fact cut at a boundary is
// still whole in one of them. Split never returns an empty chunk.
func Split(doc *Text, opts ChunkOptions) []Chunk {
	if opts.TargetTokens <= 0 {
		opts.TargetTokens = DefaultChunkOptions().TargetTokens
	}
	opts.OverlapTokens = max(0, min(opts.OverlapTokens, opts.TargetTokens/2))
	c := &chunker{opts: opts}
	for _, b := range doc.Blocks {
		if opts.MaxChunks > 0 && len(c.out) > opts.MaxChunks {
			return c.out
		}
		if b.Page != c.page || b.OCR != c.ocr {
			// A page read by OCR is a section of its own: its chunks say
			// which page to look at, and that it was read from an image.
			if c.hasBody {
				c.flush(false)
			} else if c.overlaps == len(c.units) {
				c.units, c.tokens, c.overlaps = nil, 0, 0 // no overlap across pages
			}
			c.page, c.ocr = b.Page, b.OCR
		}
		if b.Kind == Heading {
			c.heading(b)
			continue
		}
		for _, u := range blockUnits(b, opts.TargetTokens) {
			c.add(u)
		}
	}
	c.flush(false)
	return c.out
}

// unit is a piece of text that stays whole in a chunk: a block, or a
// sentence or slice of a block too big for one chunk.
type unit struct {
	text   string
	tokens int
	inline bool // joins the previous unit of its block without a line break
}

type chunker struct {
	opts     ChunkOptions
	out      []Chunk
	path     []Block // open headings, outermost first
	units    []unit
	tokens   int
	hasBody  bool // units holds more than headings and overlap
	overlaps int  // leading units that repeat the previous chunk
	page     int  // page of the pending blocks, when they carry one
	ocr      bool // the pending blocks were read by OCR
}

func (c *chunker) section() string {
	parts := make([]string, len(c.path))
	for i, h := range c.path {
		parts[i] = strings.Join(strings.Fields(h.Text), " ")
	}
	if c.page > 0 {
		label := "Page " + strconv.Itoa(c.page)
		if c.ocr {
			label += service.OCRSectionSuffix
		}
		parts = append(parts, label)
	}
	return strings.Join(parts, service.SectionSeparator)
}

func (c *chunker) heading(h Block) {
	// A heading with no body yet above it (a chapter title right before
	// its first section) stays in the pending chunk so it reaches the
	// reader; otherwise the section ends here.
	if c.hasBody {
		c.flush(false)
	}
	for len(c.path) > 0 && c.path[len(c.path)-1].Level >= h.Level {
		c.path = c.path[:len(c.path)-1]
	}
	c.path = append(c.path, h)
	t := strings.TrimSpace(h.Text)
	c.units = append(c.units, unit{text: t, tokens: text.CountTokens(t)})
	c.tokens += c.units[len(c.units)-1].tokens
	c.overlaps = 0
}

func (c *chunker) add(u unit) {
	if c.hasBody && c.tokens+u.tokens > c.opts.TargetTokens {
		c.flush(true)
		if c.tokens+u.tokens > c.opts.TargetTokens {
			c.units, c.tokens, c.overlaps = nil, 0, 0 // the overlap does not fit beside this unit
		}
	} else if !c.hasBody && c.tokens+u.tokens > c.opts.TargetTokens && len(c.units) > 0 {
		// Headings alone filling a chunk: emit them rather than overflow.
		c.hasBody = true
		c.flush(false)
	}
	c.units = append(c.units, u)
	c.tokens += u.tokens
	c.hasBody = true
}

// flush emits the pending units as a chunk; with overlap it keeps the last
// sentences, up to OverlapTokens, to start the next chunk.
func (c *chunker) flush(overlap bool) {
	if len(c.units) == 0 {
		return
	}
	content := joinUnits(c.units)
	if strings.TrimSpace(content) != "" {
		c.out = append(c.out, Chunk{
			Ordinal:    len(c.out),
			Content:    content,
			Section:    c.section(),
			TokenCount: text.CountTokens(content),
			OCR:        c.ocr,
		})
	}
	var keep []unit
	if overlap && c.opts.OverlapTokens > 0 {
		keep = tailSentences(c.units[c.overlaps:], c.opts.OverlapTokens)
	}
	c.units, c.tokens, c.overlaps, c.hasBody = keep, 0, len(keep), false
	for _, u := range keep {
		c.tokens += u.tokens
	}
}

// tailSentences returns the trailing sentences of units that fit in budget
// tokens, as inline units.
func tailSentences(units []unit, budget int) []unit {
	var tail []unit
	used := 0
	for i := len(units) - 1; i >= 0; i-- {
		sents := text.Sentences(units[i].text)
		for j := len(sents) - 1; j >= 0; j-- {
			n := text.CountTokens(sents[j])
			if used+n > budget {
				return reverse(tail)
			}
			used += n
			tail = append(tail, unit{text: sents[j], tokens: n, inline: true})
		}
	}
	return reverse(tail)
}

func reverse(us []unit) []unit {
	for i, j := 0, len(us)-1; i < j; i, j = i+1, j-1 {
		us[i], us[j] = us[j], us[i]
	}
	return us
}

// joinUnits puts blocks on their own lines and the pieces of one block back
// together the way they were written.
func joinUnits(units []unit) string {
	var b strings.Builder
	for i, u := range units {
		if i > 0 {
			if u.inline {
				last, _ := utf8.DecodeLastRuneInString(b.String())
				first, _ := utf8.DecodeRuneInString(u.text)
				if !(text.IsCJK(last) || isCJKPunct(last)) || !text.IsCJK(first) {
					b.WriteByte(' ')
				}
			} else {
				b.WriteByte('\n')
			}
		}
		b.WriteString(u.text)
	}
	return b.String()
}

func isCJKPunct(r rune) bool {
	return r >= 0x3000 && r <= 0x303F || r >= 0xFF00 && r <= 0xFFEF
}

// blockUnits returns a block as one unit, or cut into pieces of at most
// target tokens: code by lines, other text by sentences, and anything still
// too big by words or characters.
func blockUnits(b Block, target int) []unit {
	n := text.CountTokens(b.Text)
	if n <= target {
		return []unit{{text: b.Text, tokens: n}}
	}
	var pieces []string
	if b.Kind == Code {
		pieces = strings.Split(b.Text, "\n")
	} else {
		pieces = text.Sentences(b.Text)
	}
	var units []unit
	for _, p := range pieces {
		if strings.TrimSpace(p) == "" {
			continue
		}
		pn := text.CountTokens(p)
		if pn <= target {
			units = append(units, unit{text: p, tokens: pn})
			continue
		}
		for _, s := range splitByTokens(p, target) {
			units = append(units, unit{text: s, tokens: text.CountTokens(s)})
		}
	}
	for i := range units {
		units[i].inline = i > 0 && b.Kind != Code
	}
	return units
}

// splitByTokens cuts s into pieces of at most target tokens, between words
// where there are any and between characters otherwise (CJK, or one giant
// "word" such as a base64 blob).
func splitByTokens(s string, target int) []string {
	var pieces []string
	var cur strings.Builder
	curTokens := 0
	emit := func() {
		if t := strings.TrimSpace(cur.String()); t != "" {
			pieces = append(pieces, t)
		}
		cur.Reset()
		curTokens = 0
	}
	for _, a := range atoms(s) {
		n := text.CountTokens(a)
		if n > target {
			// A single word bigger than a chunk: cut it by runes.
			emit()
			runes := []rune(a)
			step := max(1, target*len(runes)/n) // runes per slice, at the word's own tokens per rune
			for i := 0; i < len(runes); i += step {
				pieces = append(pieces, string(runes[i:min(len(runes), i+step)]))
			}
			continue
		}
		if curTokens+n > target {
			emit()
		}
		cur.WriteString(a)
		curTokens += n
	}
	emit()
	return pieces
}

// atoms splits s into words with their trailing space and into single CJK
// characters, the smallest pieces splitByTokens cuts between.
func atoms(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case text.IsCJK(r):
			if i > start {
				out = append(out, s[start:i])
			}
			out = append(out, s[i:i+size])
			start = i + size
		case unicode.IsSpace(r):
			out = append(out, s[start:i+size])
			start = i + size
		}
		i += size
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
