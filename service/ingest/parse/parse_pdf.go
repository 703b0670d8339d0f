package parse

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

// parsePDF extracts the text layer page by page. A page without a usable
// one (a scan) is rendered and read by OCR unless OCR is off; with OCR off
// a scanned PDF ends as ErrEmpty.
func parsePDF(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
	pr, err := pdf.NewReader(r, size)
	if err != nil {
		if errors.Is(err, pdf.ErrInvalidPassword) || strings.Contains(err.Error(), "encrypt") {
			return nil, fmt.Errorf("%w: the PDF is password-protected", ErrEncrypted)
		}
		return nil, fmt.Errorf("%w: pdf: %v", ErrCorrupt, err)
	}
	// The library finds pages by trusting the tree's /Count and /Kids, and
	// walks /Parent chains for inherited resources, without noticing a loop
	// in either: a 244-byte file would spin forever. The pages are found
	// here instead, with bounds, and only a tree that passed is handed on.
	pages, err := pdfPages(pr, limits)
	if err != nil {
		return nil, err
	}
	doc := newText(limits)
	fonts := map[string]*pdf.Font{} // shared across pages: parsing a font's charmap is costly
	texts := make([]string, len(pages))
	var scanned []int // 1-based pages without a usable text layer
	sizes := map[int][2]float64{}
	var layerBytes int
	for i, page := range pages {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, name := range page.Fonts() {
			if _, ok := fonts[name]; !ok {
				f := page.Font(name)
				fonts[name] = &f
			}
		}
		s, err := page.GetPlainText(fonts)
		if err != nil {
			return nil, fmt.Errorf("%w: pdf page %d: %v", ErrCorrupt, i+1, err)
		}
		if layerBytes += len(s); doc.fits(layerBytes) != nil {
			return nil, doc.textErr()
		}
		texts[i] = s
		if limits.OCR.Mode != OCROff && !usableText(s) && hasImage(page.V) {
			scanned = append(scanned, i+1)
			sizes[i+1] = pageSize(page.V)
		}
	}
	var read map[int]string
	if len(scanned) > 0 {
		if read, err = ocrPDFPages(ctx, r, size, scanned, sizes, limits.OCR); err != nil {
			return nil, err
		}
	}
	for i, s := range texts {
		if t, ok := read[i+1]; ok && strings.TrimSpace(t) != "" {
			addOCRPage(doc, i+1, t)
			continue
		}
		for _, p := range splitParagraphs(cleanText(s)) {
			doc.add(Paragraph, 0, joinLines(p))
		}
	}
	return doc, nil
}

// hasImage reports whether a page draws an image: an image XObject among
// its resources (inherited from its parents), or among those of a form it
// draws, a few forms deep. A page with little text and no image is just a
// short page, not a scan, and keeps its text layer.
func hasImage(page pdf.Value) bool {
	res := pdf.Value{}
	for v, depth := page, 0; !v.IsNull() && depth <= maxPDFTreeDepth; v, depth = v.Key("Parent"), depth+1 {
		if r := v.Key("Resources"); !r.IsNull() {
			res = r
			break
		}
	}
	return resourcesHaveImage(res, 0)
}

func resourcesHaveImage(res pdf.Value, depth int) bool {
	if res.IsNull() || depth > 3 {
		return false
	}
	xo := res.Key("XObject")
	for i, k := range xo.Keys() {
		if i >= 256 {
			break
		}
		x := xo.Key(k)
		switch x.Key("Subtype").Name() {
		case "Image":
			return true
		case "Form":
			if resourcesHaveImage(x.Key("Resources"), depth+1) {
				return true
			}
		}
	}
	return false
}

// pageSize is a page's MediaBox width and height in points, inherited from
// its parents (whose chain checkParentChain bounded), or zeros.
func pageSize(page pdf.Value) [2]float64 {
	for v, depth := page, 0; !v.IsNull() && depth <= maxPDFTreeDepth; v, depth = v.Key("Parent"), depth+1 {
		box := v.Key("MediaBox")
		if box.Kind() == pdf.Array && box.Len() == 4 {
			w := box.Index(2).Float64() - box.Index(0).Float64()
			h := box.Index(3).Float64() - box.Index(1).Float64()
			return [2]float64{abs(w), abs(h)}
		}
	}
	return [2]float64{}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// maxPDFTreeDepth bounds the nesting of a PDF's page tree and the length of
// a page's /Parent chain. Real trees are balanced and a few levels deep
// (pdfTeX and Acrobat use 6 to 10 kids per node, so 10 levels hold millions
// of pages); a loop is infinitely deep, so any loop ends at this bound.
const maxPDFTreeDepth = 64

// pdfPages lists the page objects of the document in order by walking the
// page tree from the catalog. It refuses, as ErrCorrupt, a tree that loops
// through /Kids or whose pages' /Parent chains loop, and, as ErrTooLarge,
// one with more pages than the limit or so many shared subtrees that the
// walk would visit more nodes than twice that.
func pdfPages(pr *pdf.Reader, limits Limits) ([]pdf.Page, error) {
	root := pr.Trailer().Key("Root").Key("Pages")
	if root.Kind() != pdf.Dict {
		return nil, fmt.Errorf("%w: pdf: no page tree", ErrCorrupt)
	}
	var (
		pages   []pdf.Page
		visited int64
		budget  = 2*limits.MaxPages + maxPDFTreeDepth
	)
	var walk func(node pdf.Value, depth int) error
	walk = func(node pdf.Value, depth int) error {
		if depth > maxPDFTreeDepth {
			return fmt.Errorf("%w: pdf: the page tree loops back on itself (or is nested more than %d levels deep)", ErrCorrupt, maxPDFTreeDepth)
		}
		if visited++; visited > budget {
			return fmt.Errorf("%w: pdf: the page tree has more than %d nodes", ErrTooLarge, budget)
		}
		switch node.Key("Type").Name() {
		case "Page":
			if err := checkParentChain(node); err != nil {
				return err
			}
			if int64(len(pages)) >= limits.MaxPages {
				return fmt.Errorf("%w: more than %d pages", ErrTooLarge, limits.MaxPages)
			}
			pages = append(pages, pdf.Page{V: node})
		case "Pages":
			kids := node.Key("Kids")
			for i := 0; i < kids.Len(); i++ {
				if err := walk(kids.Index(i), depth+1); err != nil {
					return err
				}
			}
		}
		// Anything else is not part of the tree; the library skips it too.
		return nil
	}
	if err := walk(root, 0); err != nil {
		return nil, err
	}
	if len(pages) == 0 {
		return nil, fmt.Errorf("%w: pdf: no pages", ErrCorrupt)
	}
	return pages, nil
}

// checkParentChain follows a page's /Parent links, which the library walks
// to find inherited attributes (resources, fonts) and would follow forever
// around a loop.
func checkParentChain(page pdf.Value) error {
	v := page
	for depth := 0; !v.IsNull(); depth++ {
		if depth > maxPDFTreeDepth {
			return fmt.Errorf("%w: pdf: a page's /Parent chain loops back on itself (or is more than %d levels long)", ErrCorrupt, maxPDFTreeDepth)
		}
		v = v.Key("Parent")
	}
	return nil
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
