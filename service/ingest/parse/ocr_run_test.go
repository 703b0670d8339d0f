package parse

import (
	"context"
	"image"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ragent-go/ragent/internal/scanpage"
	"github.com/ragent-go/ragent/internal/testenv"
)

// TestOCRPDFPagesStopAtFirstFailure: a scanned PDF whose first page
// cannot be read fails with that page's error, and once it has failed no
// more pages start but the one already waiting for a process.
func TestOCRPDFPagesStopAtFirstFailure(t *testing.T) {
	testenv.OCR(t)
	en := scannedPage(t, englishPage, 150)
	file, err := scanpage.PDF([]image.Image{en, en, en, en, en, en})
	if err != nil {
		t.Fatal(err)
	}
	var progressed atomic.Int32
	ctx := withProgress(context.Background(), func() { progressed.Add(1) })
	_, err = InProcess{}.Parse(ctx, file, MimePDF, Limits{OCR: OCR{Languages: "klingon", Processes: 1}})
	if !IsPermanent(err) || !strings.Contains(err.Error(), "klingon") {
		t.Fatalf("a language not installed: err = %v, want a permanent failure naming it", err)
	}
	if n := progressed.Load(); n > 2 {
		t.Errorf("%d pages started, want at most 2 of 6 (the one that failed and the one waiting)", n)
	}
}
