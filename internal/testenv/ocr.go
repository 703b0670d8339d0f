package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// OCR fails or skips t unless Tesseract with the chi_sim and eng languages,
// pdftoppm and the Noto CJK font the test pages are set in are installed
// (scripts/services.sh start ocr browser).
func OCR(t testing.TB) {
	t.Helper()
	out, err := exec.Command("tesseract", "--list-langs").Output()
	if err == nil {
		langs := " " + strings.Join(strings.Fields(string(out)), " ") + " "
		if !strings.Contains(langs, " chi_sim ") || !strings.Contains(langs, " eng ") {
			err = fmt.Errorf("tesseract lacks chi_sim or eng: %s", strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		_, err = exec.LookPath("pdftoppm")
	}
	if err == nil {
		_, err = os.Stat("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
	}
	if err != nil {
		unavailable(t, "ocr", err)
	}
}
