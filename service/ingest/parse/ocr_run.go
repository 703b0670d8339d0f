package parse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ragent-go/ragent/text"
)

// ocrPDFPages renders the given pages (1-based) of a PDF with pdftoppm and
// reads them with tesseract, o.Processes pages at a time. sizes holds each
// page's width and height in points (0 where unknown). The result maps a
// page to its text.
func ocrPDFPages(ctx context.Context, r io.ReaderAt, size int64, pages []int, sizes map[int][2]float64, o OCR) (map[int]string, error) {
	if len(pages) > o.MaxPages {
		return nil, fmt.Errorf("%w: %d pages need OCR, more than the %d OCR reads per document", ErrTooLarge, len(pages), o.MaxPages)
	}
	dir, pdfFile, err := ocrInput(r, size, "doc.pdf")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var (
		mu  sync.Mutex
		out = map[int]string{}
	)
	// The first failure cancels the pages being read and no more start.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(min(o.Processes, len(pages)))
	for _, page := range pages {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			progress(gctx) // this page has its own PageTimeout, however long the pages before it took
			s, err := ocrPDFPage(gctx, dir, pdfFile, page, sizes[page], o)
			if err != nil {
				return err
			}
			mu.Lock()
			out[page] = s
			mu.Unlock()
			progress(gctx)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, ctx.Err()
}

// ocrPDFPage renders one page at o.DPI, or lower for a page so big that
// it would pass o.MaxPixels, and reads it.
func ocrPDFPage(ctx context.Context, dir, pdfFile string, page int, pts [2]float64, o OCR) (string, error) {
	dpi := float64(o.DPI)
	w, h := pts[0], pts[1]
	if w <= 0 || h <= 0 || w > 14400 || h > 14400 {
		w, h = 612, 792 // unknown or absurd: the crop below still bounds the pixels
	}
	if px := w / 72 * dpi * h / 72 * dpi; px > float64(o.MaxPixels) {
		dpi *= math.Sqrt(float64(o.MaxPixels) / px)
	}
	if dpi < 50 {
		return "", fmt.Errorf("%w: PDF page %d is %.0f×%.0f points, too large to read by OCR", ErrTooLarge, page, w, h)
	}
	// -W and -H crop the rendering: whatever the page claims to the
	// renderer, it never paints more than the pixels allowed.
	maxW, maxH := int64(w/72*dpi)+1, int64(h/72*dpi)+1
	root := filepath.Join(dir, "page-"+strconv.Itoa(page))
	args := []string{"-f", strconv.Itoa(page), "-l", strconv.Itoa(page), "-r", strconv.Itoa(int(dpi)),
		"-x", "0", "-y", "0", "-W", strconv.FormatInt(maxW, 10), "-H", strconv.FormatInt(maxH, 10),
		"-gray", "-png", "-singlefile", pdfFile, root}
	pctx, cancel := context.WithTimeout(ctx, o.PageTimeout)
	defer cancel()
	if _, err := runLimited(pctx, "pdftoppm", args, o); err != nil {
		return "", pageError(ctx, pctx, fmt.Sprintf("PDF page %d: rendering", page), err, o.PageTimeout)
	}
	defer os.Remove(root + ".png")
	file := deskew(root + ".png")
	if file != root+".png" {
		defer os.Remove(file)
	}
	return tesseractCtx(ctx, pctx, file, fmt.Sprintf("PDF page %d", page), o)
}

// tesseract reads an image file.
func tesseract(ctx context.Context, file string, o OCR) (string, error) {
	pctx, cancel := context.WithTimeout(ctx, o.PageTimeout)
	defer cancel()
	return tesseractCtx(ctx, pctx, file, "image", o)
}

func tesseractCtx(ctx, pctx context.Context, file, what string, o OCR) (string, error) {
	// No --dpi: pdftoppm's PNGs carry their resolution, and the hint made
	// Tesseract 5.3 read a straightened Chinese page worse (32 % CER
	// instead of 1 %).
	args := []string{file, "stdout", "-l", o.Languages}
	out, err := runLimited(pctx, "tesseract", args, o)
	if err != nil {
		return "", pageError(ctx, pctx, what+": OCR", err, o.PageTimeout)
	}
	return string(out), nil
}

// pageError names why a page could not be read: the caller gave up
// (transient), the page took too long, the program is missing, or it
// refused the input.
func pageError(ctx, pctx context.Context, what string, err error, timeout time.Duration) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case pctx.Err() != nil:
		return fmt.Errorf("%w: %s took longer than %s", ErrTooLarge, what, timeout)
	case errors.Is(err, exec.ErrNotFound):
		return fmt.Errorf("%w: %s: OCR is not installed on this worker (%v); install tesseract-ocr and poppler-utils, or use the image with OCR", ErrUnsupported, what, err)
	case errors.Is(err, errOutOfMemory):
		return fmt.Errorf("%w: %s: %v", ErrTooLarge, what, err)
	}
	return fmt.Errorf("%w: %s failed: %v", ErrCorrupt, what, err)
}

var errOutOfMemory = errors.New("ran out of its memory limit")

// runLimited runs an OCR program with an empty environment but PATH and
// TMPDIR, one thread, its address space capped at o.MemoryLimit and its
// CPU time at the page timeout, killed when pctx ends or the parser
// process dies. It returns stdout (at most 32 MiB).
func runLimited(pctx context.Context, name string, args []string, o OCR) ([]byte, error) {
	cmd := exec.CommandContext(pctx, name, args...)
	cmd.Env = []string{"OMP_THREAD_LIMIT=1"}
	for _, k := range []string{"PATH", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	isolateTool(cmd)
	cmd.WaitDelay = time.Second
	stdout := &headBuffer{max: 32 << 20}
	stderr := &headBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	limitTool(cmd.Process.Pid, o.MemoryLimit, o.PageTimeout)
	err := cmd.Wait()
	if err != nil {
		msg := toolMessage(stderr.String())
		if strings.Contains(msg, "alloc") || strings.Contains(msg, "memory") || strings.Contains(msg, "failed to map") || strings.Contains(err.Error(), "signal: killed") && pctx.Err() == nil {
			return nil, fmt.Errorf("%s %w (%s)", name, errOutOfMemory, formatBytes(o.MemoryLimit))
		}
		if msg != "" {
			return nil, fmt.Errorf("%s: %s", name, msg)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return []byte(stdout.String()), nil
}

// toolMessage keeps the lines of a program's stderr that say something,
// without Tesseract's banner lines.
func toolMessage(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Tesseract Open Source") || strings.HasPrefix(l, "Estimating resolution") ||
			strings.HasPrefix(l, "Warning: Invalid resolution") || strings.HasPrefix(l, "Detected ") {
			continue
		}
		keep = append(keep, l)
	}
	return text.Truncate(strings.Join(keep, "; "), 300)
}

// ocrInput makes a temporary directory for one OCR run and writes the
// document there as name, for the OCR programs to read. The caller removes
// dir, with whatever the run added to it; on an error nothing is left.
func ocrInput(r io.ReaderAt, size int64, name string) (dir, file string, err error) {
	dir, err = os.MkdirTemp("", "ragent-ocr-")
	if err != nil {
		return "", "", fmt.Errorf("ocr: %w", err)
	}
	file = filepath.Join(dir, name)
	if err := copyToFile(file, r, size); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, file, nil
}

func copyToFile(name string, r io.ReaderAt, size int64) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("ocr: %w", err)
	}
	_, err = io.Copy(f, io.NewSectionReader(r, 0, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ocr: write the file for OCR: %w", err)
	}
	return nil
}
