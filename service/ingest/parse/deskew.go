package parse

import (
	"bufio"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"

	xdraw "golang.org/x/image/draw"
	_ "golang.org/x/image/tiff" // decodes a TIFF's first page
)

// A sheet fed askew into a scanner comes out rotated by a few degrees, and
// Tesseract's layout analysis then drops whole lines as if they were a
// picture (a page skewed by 3° lost its first paragraph). deskew measures
// the angle and turns the page straight before Tesseract sees it.
const (
	maxSkewDegrees  = 6.0  // steeper is no skew but a layout: left alone
	skewStepDegrees = 0.1  // resolution of the search
	minSkewDegrees  = 0.25 // less is within what Tesseract handles
)

// deskew returns the path of a straightened copy of the image file, or
// file itself when the page is straight or cannot be decoded here (then
// Tesseract reads it as it is, and says what is wrong with it). The image's
// size was checked from its header before: decoding it is bounded.
func deskew(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return file
	}
	img, _, err := image.Decode(bufio.NewReader(f))
	f.Close()
	if err != nil {
		return file
	}
	gray, ok := img.(*image.Gray)
	if !ok {
		gray = image.NewGray(img.Bounds())
		draw.Draw(gray, gray.Bounds(), img, img.Bounds().Min, draw.Src)
	}
	img = nil
	angle := skewAngle(gray)
	if math.Abs(angle) < minSkewDegrees {
		return file
	}
	straight := rotate(gray, -angle)
	out := file + ".deskewed.png"
	w, err := os.Create(out)
	if err != nil {
		return file
	}
	bw := bufio.NewWriter(w)
	err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(bw, straight)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return file
	}
	return out
}

// skewAngle estimates, in degrees, the slope of a page's text lines (y
// growing with x is positive): the angle at which the dark pixels, summed
// along lines of that slope, give the most uneven profile — lines of text
// and the gaps between them line up only at the page's own angle. It looks
// at a sample of at most ~1000 columns and rows.
func skewAngle(img *image.Gray) float64 {
	b := img.Bounds()
	step := max(1, max(b.Dx(), b.Dy())/1000)
	type pt struct{ x, y float64 }
	var dark []pt
	for y := b.Min.Y; y < b.Max.Y; y += step {
		row := img.Pix[(y-b.Min.Y)*img.Stride:]
		for x := 0; x < b.Dx(); x += step {
			if row[x] < 128 {
				dark = append(dark, pt{float64(x), float64(y - b.Min.Y)})
			}
		}
	}
	if len(dark) < 100 {
		return 0
	}
	bins := make([]float64, (b.Dx()+b.Dy())/step+2)
	best, bestScore := 0.0, -1.0
	for deg := -maxSkewDegrees; deg <= maxSkewDegrees+1e-9; deg += skewStepDegrees {
		t := math.Tan(deg * math.Pi / 180)
		clear(bins)
		off := float64(b.Dx()) * maxSkewDegrees / 45 // keep indexes positive
		for _, p := range dark {
			i := int((p.y - p.x*t + off) / float64(step))
			if i >= 0 && i < len(bins) {
				bins[i]++
			}
		}
		score := 0.0
		for _, n := range bins {
			score += n * n
		}
		if score > bestScore {
			best, bestScore = deg, score
		}
	}
	return best
}

// rotate turns img by deg degrees about its centre (positive: y grows
// with x, as skewAngle measures), onto white.
func rotate(img *image.Gray, deg float64) *image.Gray {
	b := img.Bounds()
	out := image.NewGray(b)
	draw.Draw(out, b, image.White, image.Point{}, draw.Src)
	rad := deg * math.Pi / 180
	sin, cos := math.Sin(rad), math.Cos(rad)
	cx, cy := float64(b.Min.X)+float64(b.Dx())/2, float64(b.Min.Y)+float64(b.Dy())/2
	m := [6]float64{cos, -sin, cx - cos*cx + sin*cy, sin, cos, cy - sin*cx - cos*cy}
	xdraw.BiLinear.Transform(out, m, img, b, draw.Over, nil)
	return out
}
