# shellcheck shell=bash
# Part of scripts/services.sh, which reads it (source) before its main: the
# ocr service's settings and its start, stop and status steps. It uses the
# shared helpers defined there (log, die, status_line, wait_until, ...).

# --- ocr ----------------------------------------------------------------------

# Scanned PDFs and images are read by Tesseract inside the parser process
# (service/ingest/parse/ocr.go), with PDF pages rendered by poppler's
# pdftoppm and measured by pdfinfo. The OCR tests (and their generated test
# pages) need the same programs. Nothing runs between parses: start only
# installs and checks that both languages of RAGENT_OCR_LANGUAGES' default
# are there.
readonly OCR_PACKAGES="tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim poppler-utils"

ocr_languages() { tesseract --list-langs 2>/dev/null | tail -n +2 | tr '\n' ' '; }

start_ocr() {
	install_ocr
	local langs
	langs=$(ocr_languages)
	[[ " $langs " == *" chi_sim "* && " $langs " == *" eng "* ]] ||
		die "tesseract lacks chi_sim or eng (has: $langs)"
	log "ocr: $(tesseract --version 2>&1 | head -n1), languages: $langs, $(pdftoppm -v 2>&1 | head -n1)"
}

stop_ocr() { :; }

status_ocr() {
	local langs
	if command -v pdftoppm >/dev/null && langs=$(ocr_languages) &&
		[[ " $langs " == *" chi_sim "* && " $langs " == *" eng "* ]]; then
		echo "ocr       up    tesseract ($langs), pdftoppm"
	else
		echo "ocr       down  tesseract with chi_sim+eng, pdftoppm"
		return 1
	fi
}
