package parse

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig reads JPEG headers
	_ "image/png"  // and PNG headers
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	_ "golang.org/x/image/webp" // and WebP headers

	"github.com/ragent-go/ragent/text"
)

// Image media types Sniff returns; Parse reads them with OCR.
const (
	MimePNG  = "image/png"
	MimeJPEG = "image/jpeg"
	MimeTIFF = "image/tiff"
	MimeWebP = "image/webp"
)

// OCR modes.
const (
	OCRAuto = "auto" // pages without a usable text layer, and images
	OCROff  = "off"  // never: scanned pages stay empty, images are refused
)

// DefaultOCRLanguages are the Tesseract languages used when none are set.
const DefaultOCRLanguages = "chi_sim+eng"

// OCR configures reading text from images with Tesseract: images, and PDF
// pages without a usable text layer, which pdftoppm renders first. Every
// page is checked for size before a program sees it, and each run of
// tesseract or pdftoppm is bounded in memory, CPU time and wall time.
type OCR struct {
	Mode        string        // OCRAuto (default) or OCROff
	Languages   string        // tesseract -l, e.g. "chi_sim+eng"
	DPI         int           // resolution PDF pages are rendered at; default 300
	Processes   int           // OCR processes per document running at once; default 2
	MaxPixels   int64         // pixels of one page or image; default 60 million
	MaxPages    int           // pages read by OCR per document; default 500
	PageTimeout time.Duration // wall time for rendering and reading one page; default 2 minutes
	MemoryLimit int64         // address space of one tesseract or pdftoppm process; default 1 GiB
}

func (o OCR) withDefaults() OCR {
	if o.Mode == "" {
		o.Mode = OCRAuto
	}
	if o.Languages == "" {
		o.Languages = DefaultOCRLanguages
	}
	o.DPI = positiveOr(o.DPI, 300)
	o.Processes = positiveOr(o.Processes, 2)
	o.MaxPixels = positiveOr(o.MaxPixels, 60_000_000)
	o.MaxPages = positiveOr(o.MaxPages, 500)
	o.PageTimeout = positiveOr(o.PageTimeout, 2*time.Minute)
	o.MemoryLimit = positiveOr(o.MemoryLimit, 1<<30)
	return o
}

// ValidOCRLanguages reports whether s is a Tesseract language list: names
// of letters, digits and underscores joined by "+".
func ValidOCRLanguages(s string) bool {
	if s == "" {
		return false
	}
	for _, l := range strings.Split(s, "+") {
		if l == "" || len(l) > 32 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
				return false
			}
		}
	}
	return true
}

// OCRLanguages lists the languages the installed Tesseract reads, or an
// error saying that it is not installed.
func OCRLanguages(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tesseract", "--list-langs").Output()
	if err != nil {
		return nil, fmt.Errorf("tesseract --list-langs: %w", err)
	}
	var langs []string
	for _, l := range strings.Split(string(out), "\n")[1:] {
		if l = strings.TrimSpace(l); l != "" {
			langs = append(langs, l)
		}
	}
	return langs, nil
}

// progressKey carries the func an OCR step calls as it starts and ends
// each page, so the deadline of a long document moves with its progress:
// each page may take OCR.PageTimeout, on top of the parse timeout (see
// guard and ChildParser).
type progressKey struct{}

func withProgress(ctx context.Context, f func()) context.Context {
	if outer, ok := ctx.Value(progressKey{}).(func()); ok {
		inner := f
		f = func() { inner(); outer() }
	}
	return context.WithValue(ctx, progressKey{}, f)
}

func progress(ctx context.Context) {
	if f, ok := ctx.Value(progressKey{}).(func()); ok {
		f()
	}
}

// parseImage reads an image file with OCR, every page of a multi-page TIFF.
func parseImage(mime string) parser {
	return func(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
		o := limits.OCR
		if o.Mode == OCROff {
			return nil, fmt.Errorf("%w: %s: reading images needs OCR, which is off (RAGENT_OCR=off)", ErrUnsupported, imageName(mime))
		}
		pages, err := checkImage(r, size, mime, o)
		if err != nil {
			return nil, err
		}
		dir, file, err := ocrInput(r, size, "image")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		progress(ctx)
		if pages == 1 {
			file = deskew(file) // x/image/tiff decodes a TIFF's first page only: a multi-page one goes as it is
		}
		out, err := tesseract(ctx, file, o)
		if err != nil {
			return nil, err
		}
		progress(ctx)
		doc := newText(limits)
		// Tesseract ends each page of a multi-page TIFF with a form feed.
		for i, page := range strings.Split(out, "\f") {
			if i >= pages && strings.TrimSpace(page) == "" {
				break
			}
			addOCRPage(doc, min(i+1, pages), page)
		}
		return doc, doc.textErr()
	}
}

func imageName(mime string) string {
	return strings.ToUpper(strings.TrimPrefix(mime, "image/")) + " image"
}

// checkImage reads an image's dimensions from its header, without decoding
// its pixels, and refuses one too big to read: a decompression bomb (a
// small file that would decode to gigabytes) fails here, in microseconds,
// before any program allocates its pixels. It returns the number of pages.
func checkImage(r io.ReaderAt, size int64, mime string, o OCR) (int, error) {
	name := imageName(mime)
	if mime == MimeTIFF {
		dims, err := tiffPages(io.NewSectionReader(r, 0, size), o.MaxPages)
		if err != nil {
			return 0, err
		}
		for i, d := range dims {
			if err := checkPixels(fmt.Sprintf("%s page %d", name, i+1), d[0], d[1], o.MaxPixels); err != nil {
				return 0, err
			}
		}
		return len(dims), nil
	}
	cfg, _, err := image.DecodeConfig(io.NewSectionReader(r, 0, size))
	if err != nil {
		return 0, fmt.Errorf("%w: not a readable %s: %v", ErrCorrupt, name, err)
	}
	return 1, checkPixels(name, int64(cfg.Width), int64(cfg.Height), o.MaxPixels)
}

func checkPixels(what string, w, h, max int64) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("%w: the %s has no pixels (%d×%d)", ErrCorrupt, what, w, h)
	}
	if w > 1<<20 || h > 1<<20 || w*h > max {
		return fmt.Errorf("%w: the %s is %d×%d pixels, more than the %d megapixels OCR reads", ErrTooLarge, what, w, h, max/1_000_000)
	}
	return nil
}

// tiffPages walks a TIFF's chain of image directories and returns each
// page's width and height, refusing a chain that loops or is too long.
func tiffPages(r io.ReadSeeker, maxPages int) ([][2]int64, error) {
	corrupt := func(why string) error { return fmt.Errorf("%w: not a readable TIFF image: %s", ErrCorrupt, why) }
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, corrupt("no header")
	}
	var bo binary.ByteOrder
	switch string(head[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return nil, corrupt("bad byte order")
	}
	if bo.Uint16(head[2:]) != 42 {
		return nil, corrupt("not classic TIFF")
	}
	var pages [][2]int64
	seen := map[uint32]bool{}
	for off := bo.Uint32(head[4:]); off != 0; {
		if seen[off] {
			return nil, corrupt("its directories loop")
		}
		seen[off] = true
		if len(pages) >= maxPages {
			return nil, fmt.Errorf("%w: the TIFF image has more than %d pages", ErrTooLarge, maxPages)
		}
		if _, err := r.Seek(int64(off), io.SeekStart); err != nil {
			return nil, corrupt("bad directory offset")
		}
		var n [2]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, corrupt("truncated directory")
		}
		entries := make([]byte, 12*int(bo.Uint16(n[:]))+4)
		if _, err := io.ReadFull(r, entries); err != nil {
			return nil, corrupt("truncated directory")
		}
		var w, h int64
		for e := 0; e+12 <= len(entries)-4; e += 12 {
			tag, typ := bo.Uint16(entries[e:]), bo.Uint16(entries[e+2:])
			var v int64
			switch typ {
			case 3: // SHORT
				v = int64(bo.Uint16(entries[e+8:]))
			case 4: // LONG
				v = int64(bo.Uint32(entries[e+8:]))
			default:
				continue
			}
			switch tag {
			case 256:
				w = v
			case 257:
				h = v
			}
		}
		pages = append(pages, [2]int64{w, h})
		off = bo.Uint32(entries[len(entries)-4:])
	}
	if len(pages) == 0 {
		return nil, corrupt("no image directory")
	}
	return pages, nil
}

// usableText reports whether a PDF page's text layer holds text worth
// keeping: a scan has none, or only a few characters (a stamped page
// number), or undecodable glyphs (a font without a Unicode map), and is
// read by OCR instead.
func usableText(s string) bool {
	good, bad := 0, 0
	for _, r := range s {
		switch {
		case r == utf8.RuneError || unicode.Is(unicode.Co, r) || unicode.IsControl(r) && !unicode.IsSpace(r):
			bad++
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			good++
		}
	}
	return good >= 16 && bad*4 < good
}

// addOCRPage adds the text Tesseract read from one page: paragraphs
// separated by blank lines, their lines joined, the spaces Tesseract puts
// between Chinese characters dropped.
func addOCRPage(doc *Text, page int, s string) {
	for _, p := range splitParagraphs(cleanText(s)) {
		t := dropCJKSpaces(joinLines(p))
		if strings.TrimSpace(t) == "" {
			continue
		}
		before := len(doc.Blocks)
		doc.add(Paragraph, 0, t)
		if len(doc.Blocks) > before {
			doc.Blocks[before].Page, doc.Blocks[before].OCR = page, true
		}
	}
}

// dropCJKSpaces removes white space between two CJK characters (or CJK
// punctuation), which Chinese does not have and Tesseract writes.
func dropCJKSpaces(s string) string {
	if !strings.ContainsFunc(s, text.IsCJK) {
		return s
	}
	rs := []rune(s)
	var b bytes.Buffer
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		if r == ' ' {
			j := i
			for j < len(rs) && rs[j] == ' ' {
				j++
			}
			if i > 0 && j < len(rs) && cjkish(rs[i-1]) && cjkish(rs[j]) {
				i = j - 1
				continue
			}
		}
		b.WriteRune(r)
	}
	return b.String()
}

func cjkish(r rune) bool { return text.IsCJK(r) || isCJKPunct(r) }
