// Package scanpage makes scans whose text is known: it lays text out on
// A4 pages with Debian's Noto CJK font (fonts-noto-cjk), rasterizes them at
// a resolution, optionally skews them or draws a table, and wraps the page
// images in a PDF without a text layer, as a scanner would. The OCR tests
// and `ragent eval --scan` read such pages and compare what OCR found with
// the text that was drawn.
package scanpage

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"math"
	"os"
	"strings"
	"sync"
	"unicode"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/image/math/fixed"
)

// FontFile is where Debian's fonts-noto-cjk keeps the font pages are set in.
const FontFile = "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"

// Options lay out a page.
type Options struct {
	DPI       int     // resolution; default 300
	PointSize float64 // type size; default 12
	Skew      float64 // degrees the page is rotated by, as a sheet fed askew
}

func (o Options) withDefaults() Options {
	if o.DPI <= 0 {
		o.DPI = 300
	}
	if o.PointSize <= 0 {
		o.PointSize = 12
	}
	return o
}

var (
	fontOnce sync.Once
	cjkFont  *sfnt.Font
	fontErr  error
)

func loadFont() (*sfnt.Font, error) {
	fontOnce.Do(func() {
		b, err := os.ReadFile(FontFile)
		if err != nil {
			fontErr = fmt.Errorf("scanpage: %w (install fonts-noto-cjk)", err)
			return
		}
		c, err := opentype.ParseCollection(b)
		if err != nil {
			fontErr = fmt.Errorf("scanpage: %s: %w", FontFile, err)
			return
		}
		for i := 0; i < c.NumFonts(); i++ {
			f, err := c.Font(i)
			if err != nil {
				continue
			}
			if name, _ := f.Name(nil, sfnt.NameIDFull); name == "Noto Sans CJK SC" {
				cjkFont = f
				return
			}
		}
		fontErr = errors.New("scanpage: no Noto Sans CJK SC in " + FontFile)
	})
	return cjkFont, fontErr
}

// page is an A4 sheet being filled.
type page struct {
	img    *image.Gray
	face   font.Face
	margin int
	line   int // line height in pixels
	y      int // baseline of the next line
}

func newPage(o Options) (*page, error) {
	f, err := loadFont()
	if err != nil {
		return nil, err
	}
	face, err := opentype.NewFace(f, &opentype.FaceOptions{Size: o.PointSize, DPI: float64(o.DPI), Hinting: font.HintingNone})
	if err != nil {
		return nil, err
	}
	w, h := int(8.27*float64(o.DPI)), int(11.69*float64(o.DPI))
	img := image.NewGray(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	line := int(o.PointSize * 1.6 * float64(o.DPI) / 72)
	margin := o.DPI // one inch
	return &page{img: img, face: face, margin: margin, line: line, y: margin + line}, nil
}

func (p *page) full() bool { return p.y > p.img.Bounds().Dy()-p.margin }

func (p *page) draw(x int, s string) {
	d := font.Drawer{Dst: p.img, Src: image.Black, Face: p.face, Dot: fixed.P(x, p.y)}
	d.DrawString(s)
}

func (p *page) width(s string) int { return font.MeasureString(p.face, s).Ceil() }

// lines wraps a paragraph to width pixels: Latin text between words,
// Chinese between any two characters.
func (p *page) lines(para string, width int) []string {
	var out []string
	var cur strings.Builder
	for _, w := range words(para) {
		if cur.Len() > 0 && p.width(cur.String()+w) > width {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			w = strings.TrimLeft(w, " ")
		}
		cur.WriteString(w)
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// words splits s into pieces a line may end after: a Latin word with the
// space before it, or one CJK character (with its trailing punctuation).
func words(s string) []string {
	var out []string
	var cur []rune
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Han, r):
			if len(cur) > 0 {
				out = append(out, string(cur))
			}
			cur = []rune{r}
		case unicode.IsSpace(r):
			if len(cur) > 0 {
				out = append(out, string(cur))
			}
			cur = []rune{' '}
		default:
			if len(cur) == 1 && unicode.Is(unicode.Han, cur[0]) && !unicode.IsPunct(r) {
				out = append(out, string(cur))
				cur = nil
			}
			cur = append(cur, r)
		}
	}
	if len(cur) > 0 {
		out = append(out, string(cur))
	}
	return out
}

// Text lays out paragraphs (separated by blank lines) on as many pages as
// they need. Each page comes with the text drawn on it, one line per line.
func Text(s string, o Options) ([]*image.Gray, []string, error) {
	o = o.withDefaults()
	var (
		pages []*image.Gray
		texts []string
		drawn strings.Builder
	)
	p, err := newPage(o)
	if err != nil {
		return nil, nil, err
	}
	finish := func() {
		pages = append(pages, skew(p.img, o.Skew))
		texts = append(texts, strings.TrimSpace(drawn.String()))
		drawn.Reset()
	}
	for _, para := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n\n") {
		para = strings.Join(strings.Fields(para), " ")
		if para == "" {
			continue
		}
		for _, l := range p.lines(para, p.img.Bounds().Dx()-2*p.margin) {
			if p.full() {
				finish()
				if p, err = newPage(o); err != nil {
					return nil, nil, err
				}
			}
			p.draw(p.margin, l)
			drawn.WriteString(l + "\n")
			p.y += p.line
		}
		p.y += p.line / 2
		drawn.WriteString("\n")
	}
	finish()
	return pages, texts, nil
}

// Table draws a title and a ruled table of rows on one page and returns it
// with its text: the title, then each row's cells separated by spaces.
func Table(title string, rows [][]string, o Options) (*image.Gray, string, error) {
	o = o.withDefaults()
	p, err := newPage(o)
	if err != nil {
		return nil, "", err
	}
	p.draw(p.margin, title)
	p.y += 2 * p.line
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	width := p.img.Bounds().Dx() - 2*p.margin
	colW := width / max(1, cols)
	top := p.y - p.line + p.line/4
	pad := o.DPI / 20
	var drawn strings.Builder
	drawn.WriteString(title + "\n")
	for _, r := range rows {
		for i, c := range r {
			p.draw(p.margin+i*colW+pad, c)
		}
		drawn.WriteString(strings.Join(r, " ") + "\n")
		p.y += p.line
	}
	bottom := p.y - p.line + p.line/4
	rule := max(1, o.DPI/150)
	for i := 0; i <= len(rows); i++ {
		y := top + i*(bottom-top)/max(1, len(rows))
		fill(p.img, image.Rect(p.margin, y, p.margin+cols*colW, y+rule))
	}
	for i := 0; i <= cols; i++ {
		x := p.margin + i*colW
		fill(p.img, image.Rect(x, top, x+rule, bottom+rule))
	}
	return skew(p.img, o.Skew), strings.TrimSpace(drawn.String()), nil
}

func fill(img *image.Gray, r image.Rectangle) {
	draw.Draw(img, r, image.Black, image.Point{}, draw.Src)
}

// skew rotates img by deg degrees about its centre, on white.
func skew(img *image.Gray, deg float64) *image.Gray {
	if deg == 0 {
		return img
	}
	b := img.Bounds()
	out := image.NewGray(b)
	draw.Draw(out, b, image.White, image.Point{}, draw.Src)
	rad := deg * math.Pi / 180
	sin, cos := math.Sin(rad), math.Cos(rad)
	cx, cy := float64(b.Dx())/2, float64(b.Dy())/2
	// The affine map from source to destination: rotate about the centre.
	m := [6]float64{cos, -sin, cx - cos*cx + sin*cy, sin, cos, cy - sin*cx - cos*cy}
	xdraw.BiLinear.Transform(out, m, img, b, draw.Over, nil)
	return out
}

// JPEG encodes a page as a scanner would (quality 90).
func JPEG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90})
	return buf.Bytes(), err
}

// PDF wraps page images in a PDF with no text layer: each page one JPEG
// image drawn over the whole A4 page.
func PDF(pages []image.Image) ([]byte, error) {
	var (
		buf     bytes.Buffer
		offsets []int
	)
	obj := func(body string, stream []byte) {
		offsets = append(offsets, buf.Len())
		fmt.Fprintf(&buf, "%d 0 obj\n%s", len(offsets), body)
		if stream != nil {
			buf.WriteString("\nstream\n")
			buf.Write(stream)
			buf.WriteString("\nendstream")
		}
		buf.WriteString("\nendobj\n")
	}
	buf.WriteString("%PDF-1.4\n%\xE2\xE3\xCF\xD3\n")
	n := len(pages)
	// Objects: 1 catalog, 2 page tree, then per page: page, content, image.
	kids := make([]string, n)
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 3+3*i)
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>", nil)
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), n), nil)
	const w, h = 595.28, 841.89 // A4 in points
	for i, img := range pages {
		data, err := JPEG(img)
		if err != nil {
			return nil, err
		}
		b := img.Bounds()
		content, im := 4+3*i, 5+3*i
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %.2f %.2f] /Resources << /XObject << /Im%d %d 0 R >> >> /Contents %d 0 R >>",
			w, h, i, im, content), nil)
		cs := []byte(fmt.Sprintf("q %.2f 0 0 %.2f 0 0 cm /Im%d Do Q", w, h, i))
		obj(fmt.Sprintf("<< /Length %d >>", len(cs)), cs)
		colorSpace := "/DeviceRGB"
		if _, gray := img.(*image.Gray); gray {
			colorSpace = "/DeviceGray" // the encoder writes one component
		}
		obj(fmt.Sprintf("<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace %s /BitsPerComponent 8 /Filter /DCTDecode /Length %d >>",
			b.Dx(), b.Dy(), colorSpace, len(data)), data)
	}
	xref := buf.Len()
	fmt.Fprintf(&buf, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, off := range offsets {
		fmt.Fprintf(&buf, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&buf, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return buf.Bytes(), nil
}
