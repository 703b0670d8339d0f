// Package parse reads untrusted files: it sniffs a file's media type from its
// bytes (sniff.go), turns a PDF, Word, PowerPoint, Excel, HTML, Markdown,
// CSV or plain-text file into format-independent blocks under limits a
// hostile file cannot pass (parse*.go), cuts those blocks into chunks by
// structure (chunk.go), and can run each parse in a child process that a
// timeout or memory cap really ends (child*.go). File in, blocks and chunks
// out: it knows no store and no Service; ingest drives it.
package parse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Media types Sniff returns and Parse accepts.
const (
	MimeText     = "text/plain"
	MimeMarkdown = "text/markdown"
	MimeHTML     = "text/html"
	MimeCSV      = "text/csv"
	MimePDF      = "application/pdf"
	MimeDOCX     = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
	MimePPTX     = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
	MimeXLSX     = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
)

// Parse failures. All of them are permanent: retrying the same bytes fails the
// same way, so the document should end `failed` with the error's message
// rather than be redelivered. Each wraps the service sentinel the API maps to
// a status, so a rejection at upload time answers 415, 413 or 400.
var (
	ErrUnsupported = &parseError{"unsupported file type", service.ErrUnsupported}
	ErrEncrypted   = &parseError{"encrypted or password-protected file", service.ErrUnsupported}
	ErrTooLarge    = &parseError{"file exceeds an ingestion limit", service.ErrTooLarge}
	ErrCorrupt     = &parseError{"corrupt or malformed file", service.ErrInvalid}
	ErrEmpty       = &parseError{"file contains no text", service.ErrInvalid}
)

// parseError is a sentinel with its own message that still matches the
// service sentinel it belongs to under errors.Is.
type parseError struct {
	msg  string
	kind error
}

func (e *parseError) Error() string { return e.msg }
func (e *parseError) Unwrap() error { return e.kind }

// IsPermanent reports whether err is a parse failure that retrying cannot fix.
func IsPermanent(err error) bool {
	for _, p := range []error{ErrUnsupported, ErrEncrypted, ErrTooLarge, ErrCorrupt, ErrEmpty} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// BlockKind is the structural role of a Block.
type BlockKind int

// Block kinds, in the order a chunker cares about them.
const (
	Paragraph BlockKind = iota
	Heading
	ListItem
	TableRow
	Code
)

func (k BlockKind) String() string {
	switch k {
	case Heading:
		return "heading"
	case ListItem:
		return "list-item"
	case TableRow:
		return "table-row"
	case Code:
		return "code"
	}
	return "paragraph"
}

// Block is one structural unit of a document: the chunker keeps a block
// whole when it fits and starts a new section at each heading.
type Block struct {
	Kind  BlockKind
	Level int // heading level, 1 = top; 0 for other kinds
	Text  string
	Page  int  `json:",omitempty"` // 1-based page of a block read by OCR; 0 otherwise
	OCR   bool `json:",omitempty"` // the text was read from an image by OCR
}

// Text is the format-independent result of parsing a file: its text as
// blocks in reading order. (The stored record of an upload is
// service.Document; this is only what its file says.)
type Text struct {
	Blocks []Block

	size int64 // bytes of text in Blocks
	max  int64 // the text cap (Limits.MaxTextBytes); 0 means none
	full bool  // a block was refused because it would pass the cap
}

// newText returns an empty document that holds at most the text cap of
// limits: parsers stop filling it, and fail, once a small file has expanded
// past the cap, instead of holding the whole expansion in memory.
func newText(limits Limits) *Text {
	return &Text{max: limits.MaxTextBytes}
}

// fits reports, as ErrTooLarge, whether n more bytes of text would pass the
// cap; parsers check the text they are still assembling with it.
func (d *Text) fits(n int) error {
	if d.max > 0 && d.size+int64(n) > d.max {
		d.full = true
	}
	return d.textErr()
}

// textErr is ErrTooLarge once the document has reached its text cap.
func (d *Text) textErr() error {
	if !d.full {
		return nil
	}
	return fmt.Errorf("%w: the extracted text exceeds the limit of %s per document", ErrTooLarge, formatBytes(d.max))
}

// formatBytes renders a size for people: whole MiB or KiB when exact.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// add appends a block unless its text is blank or the document is full.
func (d *Text) add(kind BlockKind, level int, text string) {
	if kind != Code {
		text = strings.TrimSpace(text)
	} else {
		text = strings.Trim(text, "\n")
	}
	if strings.TrimSpace(text) == "" {
		return
	}
	if kind != Heading {
		level = 0
	}
	if d.fits(len(text)) != nil {
		return
	}
	d.size += int64(len(text))
	d.Blocks = append(d.Blocks, Block{Kind: kind, Level: level, Text: text})
}

// Limits bound the work Parse does on untrusted input. A zero field takes
// its value from DefaultLimits.
type Limits struct {
	MaxTextBytes         int64         // text extracted from one document, all blocks together
	MaxDecompressedBytes int64         // total bytes read out of a zip container, or of a text file
	MaxZipEntries        int64         // entries in a zip container (docx, pptx, xlsx)
	MaxPages             int64         // PDF pages
	MaxRows              int64         // spreadsheet and CSV rows, all sheets together
	Timeout              time.Duration // wall time for one Parse; each page read by OCR extends it by up to OCR.PageTimeout
	OCR                  OCR           // reading images and scanned pages
}

// DefaultLimits are generous for real documents and small enough that one
// hostile upload cannot exhaust a worker.
func DefaultLimits() Limits {
	return Limits{
		MaxTextBytes:         20 << 20,
		MaxDecompressedBytes: 256 << 20,
		MaxZipEntries:        10_000,
		MaxPages:             2_000,
		MaxRows:              200_000,
		Timeout:              2 * time.Minute,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MaxTextBytes = positiveOr(l.MaxTextBytes, d.MaxTextBytes)
	l.MaxDecompressedBytes = positiveOr(l.MaxDecompressedBytes, d.MaxDecompressedBytes)
	l.MaxZipEntries = positiveOr(l.MaxZipEntries, d.MaxZipEntries)
	l.MaxPages = positiveOr(l.MaxPages, d.MaxPages)
	l.MaxRows = positiveOr(l.MaxRows, d.MaxRows)
	l.Timeout = positiveOr(l.Timeout, d.Timeout)
	l.OCR = l.OCR.withDefaults()
	return l
}

// positiveOr is v, or def where v is zero or negative (unset).
func positiveOr[T ~int | ~int64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// oleMagic starts every Compound File Binary: legacy .doc/.xls/.ppt and,
// importantly, password-protected OOXML, which Office wraps in CFB.
var oleMagic = []byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1}

// parser reads one media type.
type parser func(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error)

// parsers are the media types Parse reads, each with its parser.
var parsers = map[string]parser{
	MimeText: textParser(parsePlain), MimeMarkdown: textParser(parseMarkdown), MimeHTML: textParser(parseHTML),
	MimeCSV: parseCSV, MimePDF: parsePDF, MimeDOCX: parseDOCX, MimePPTX: parsePPTX, MimeXLSX: parseXLSX,
	MimePNG: parseImage(MimePNG), MimeJPEG: parseImage(MimeJPEG), MimeTIFF: parseImage(MimeTIFF), MimeWebP: parseImage(MimeWebP),
}

// Parse reads the file r of the given size as the media type mime (one of
// the Mime constants, as returned by Sniff) and returns its blocks.
//
// Failures caused by the file are returned wrapping one of the Err*
// sentinels above; a cancelled ctx returns ctx's error, which is transient.
// Parse never panics: a panic inside a third-party parser becomes ErrCorrupt.
// When the time limit passes, Parse returns ErrTooLarge at once; a parser
// stuck inside a library call may keep running, and reading r, afterwards
// (nothing can stop a goroutine), so r must stay valid (e.g. a byte slice or
// an open temporary file that is closed by the garbage collector, not
// reused). ChildParser runs Parse where a timeout really ends it.
func Parse(ctx context.Context, r io.ReaderAt, size int64, mime string, limits Limits) (*Text, error) {
	limits = limits.withDefaults()
	if size <= 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrEmpty)
	}
	var head [8]byte
	if n, _ := r.ReadAt(head[:], 0); n == len(head) && bytes.Equal(head[:], oleMagic) {
		return nil, fmt.Errorf("%w: encrypted or legacy Office format (.doc, .xls, .ppt or a password-protected file); save it as an unprotected .docx, .xlsx or .pptx", ErrEncrypted)
	}
	parse, ok := parsers[mime]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnsupported, mime)
	}
	doc, err := guard(ctx, limits.Timeout, limits.OCR.PageTimeout, func(ctx context.Context) (*Text, error) { return parse(ctx, r, size, limits) })
	if err != nil {
		return nil, err
	}
	if err := doc.textErr(); err != nil {
		return nil, err
	}
	if len(doc.Blocks) == 0 {
		return nil, fmt.Errorf("%w: no text could be extracted", ErrEmpty)
	}
	return doc, nil
}

// guard runs parse with a deadline and turns its panics into ErrCorrupt.
// The parse runs in its own goroutine so a library that ignores ctx cannot
// hold the caller past the deadline. Each page read by OCR moves the
// deadline to at least perPage from then: a long scan ends when a page
// stalls, not when the document is long.
func guard(ctx context.Context, timeout, perPage time.Duration, parse func(context.Context) (*Text, error)) (*Text, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		deadline = time.Now().Add(timeout)
		timer    = time.NewTimer(timeout)
	)
	defer timer.Stop()
	pctx = withProgress(pctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if d := time.Now().Add(perPage); d.After(deadline) {
			deadline = d
			timer.Reset(time.Until(d))
		}
	})
	type result struct {
		doc *Text
		err error
	}
	done := make(chan result, 1) // buffered: an abandoned parse must not block forever
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("%w: the parser crashed on this file (%v)", ErrCorrupt, p)}
			}
		}()
		doc, err := parse(pctx)
		done <- result{doc, err}
	}()
	select {
	case res := <-done:
		return res.doc, res.err
	case <-timer.C:
		cancel()
		return nil, deadlineError(ctx, timeout)
	case <-ctx.Done():
		return nil, deadlineError(ctx, timeout)
	}
}

func deadlineError(ctx context.Context, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err // the caller gave up (shutdown): not the file's fault
	}
	return fmt.Errorf("%w: parsing took longer than %s", ErrTooLarge, timeout)
}

// readAllLimited reads r fully, failing with ErrTooLarge past max bytes.
func readAllLimited(r io.ReaderAt, size, max int64) ([]byte, error) {
	if size > max {
		return nil, fmt.Errorf("%w: %d bytes of text exceed the %d-byte limit", ErrTooLarge, size, max)
	}
	b := make([]byte, size)
	n, err := r.ReadAt(b, 0)
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, fmt.Errorf("read: %w", err)
	}
	return b, nil
}
