package parse

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// SniffLen is how much of a file Sniff wants to see.
const SniffLen = 8 << 10

var (
	pdfMagic = []byte("%PDF-")
	zipMagic = []byte("PK\x03\x04")
)

// binaryMagics are common non-document formats, named so the error says
// what was uploaded.
var binaryMagics = []struct {
	magic []byte
	name  string
}{
	{[]byte("GIF8"), "GIF image"},
	{[]byte("\x1F\x8B"), "gzip archive"},
	{[]byte("Rar!"), "RAR archive"},
	{[]byte("7z\xBC\xAF\x27\x1C"), "7-Zip archive"},
	{[]byte("\x7FELF"), "executable"},
	{[]byte("MZ"), "executable"},
	{[]byte("{\\rtf"), "RTF document"},
}

// Sniff decides a file's media type from its first bytes (up to SniffLen;
// more is ignored). The content decides: PDF and zip magic, the Office
// folders named in a zip's first local headers, text versus binary. The
// filename's extension only tells apart kinds of text (Markdown, CSV, HTML,
// plain) and, for a zip whose head names no Office folder, which Office
// format it claims to be — Parse then checks the container for real.
//
// Errors wrap ErrEmpty, ErrEncrypted (legacy or protected Office files) or
// ErrUnsupported.
func Sniff(head []byte, filename string) (string, error) {
	if len(head) > SniffLen {
		head = head[:SniffLen]
	}
	ext := strings.ToLower(path.Ext(strings.ReplaceAll(filename, "\\", "/")))
	switch {
	case len(bytes.TrimSpace(head)) == 0:
		if len(head) == 0 {
			return "", fmt.Errorf("%w: the file is empty", ErrEmpty)
		}
		return "", fmt.Errorf("%w: the file contains only white space", ErrEmpty)
	case bytes.HasPrefix(head, pdfMagic):
		return MimePDF, nil
	case bytes.HasPrefix(head, oleMagic):
		return "", fmt.Errorf("%w: encrypted or legacy Office format (.doc, .xls, .ppt or a password-protected file); save it as an unprotected .docx, .xlsx or .pptx", ErrEncrypted)
	case bytes.HasPrefix(head, zipMagic):
		return sniffZipHead(head, ext)
	}
	if m := sniffImage(head); m != "" {
		return m, nil
	}
	for _, m := range binaryMagics {
		if bytes.HasPrefix(head, m.magic) {
			return "", fmt.Errorf("%w: %s", ErrUnsupported, m.name)
		}
	}
	if !looksLikeText(head) {
		return "", fmt.Errorf("%w: binary content", ErrUnsupported)
	}
	return sniffText(head, ext), nil
}

// SniffReaderAt is Sniff for a file that is fully available: for a zip it
// reads the central directory, which names every entry, instead of guessing
// from the first local headers.
func SniffReaderAt(r io.ReaderAt, size int64, filename string) (string, error) {
	head := make([]byte, min(size, SniffLen))
	n, err := r.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("sniff: %w", err)
	}
	head = head[:n]
	if !bytes.HasPrefix(head, zipMagic) {
		return Sniff(head, filename)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return "", fmt.Errorf("%w: not a readable zip container: %v", ErrCorrupt, err)
	}
	for _, f := range zr.File {
		if m := officeMime(f.Name); m != "" {
			return m, nil
		}
	}
	return "", fmt.Errorf("%w: a zip archive that is not a .docx, .pptx or .xlsx document", ErrUnsupported)
}

// officeMime maps an entry of an OOXML package to the package's type.
func officeMime(name string) string {
	switch {
	case strings.HasPrefix(name, "word/"):
		return MimeDOCX
	case strings.HasPrefix(name, "ppt/"):
		return MimePPTX
	case strings.HasPrefix(name, "xl/"):
		return MimeXLSX
	}
	return ""
}

// sniffZipHead reads the names of the local file headers within head.
func sniffZipHead(head []byte, ext string) (string, error) {
	for i := 0; i+30 <= len(head); {
		if !bytes.Equal(head[i:i+4], zipMagic) {
			break
		}
		nameLen := int(head[i+26]) | int(head[i+27])<<8
		extraLen := int(head[i+28]) | int(head[i+29])<<8
		compSize := int(head[i+18]) | int(head[i+19])<<8 | int(head[i+20])<<16 | int(head[i+21])<<24
		if i+30+nameLen > len(head) {
			break
		}
		if m := officeMime(string(head[i+30 : i+30+nameLen])); m != "" {
			return m, nil
		}
		next := i + 30 + nameLen + extraLen + compSize
		if head[i+6]&0x08 != 0 {
			// The sizes follow the data (streaming writers do this): look
			// for the next header's signature instead.
			j := bytes.Index(head[i+30+nameLen:], zipMagic)
			if j < 0 {
				break
			}
			next = i + 30 + nameLen + j
		}
		i = next
	}
	switch ext {
	case ".docx":
		return MimeDOCX, nil
	case ".pptx":
		return MimePPTX, nil
	case ".xlsx":
		return MimeXLSX, nil
	}
	return "", fmt.Errorf("%w: a zip archive that is not a .docx, .pptx or .xlsx document", ErrUnsupported)
}

// looksLikeText reports whether head decodes as text in an encoding
// decodeText knows, with few control characters.
func looksLikeText(head []byte) bool {
	if bytes.HasPrefix(head, bomUTF16LE) || bytes.HasPrefix(head, bomUTF16BE) {
		return true
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	if !decodesAsText(head) {
		return false
	}
	controls := 0
	for _, c := range head {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' {
			controls++
		}
	}
	return controls*100 <= len(head) // more than 1% control bytes: binary
}

// decodesAsText reports whether head is UTF-8 or GB18030, allowing for a
// multi-byte character cut off at its end.
func decodesAsText(head []byte) bool {
	for cut := 0; cut < utf8.UTFMax && cut < len(head); cut++ {
		b := head[:len(head)-cut]
		if utf8.Valid(b) {
			return true
		}
		if _, ok := decodeGB18030(b); ok {
			return true
		}
	}
	return false
}

func sniffText(head []byte, ext string) string {
	switch ext {
	case ".md", ".markdown", ".mdown", ".mkd":
		return MimeMarkdown
	case ".csv", ".tsv":
		return MimeCSV
	case ".html", ".htm", ".xhtml":
		return MimeHTML
	case ".txt", ".text", ".log":
		return MimeText
	}
	// No telling extension: recognise HTML by its opening.
	start := bytes.ToLower(bytes.TrimSpace(bytes.TrimPrefix(head, bomUTF8)))
	if bytes.HasPrefix(start, []byte("<!doctype html")) || bytes.HasPrefix(start, []byte("<html")) {
		return MimeHTML
	}
	return MimeText
}

// sniffImage names the image formats Parse reads by OCR.
func sniffImage(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")):
		return MimePNG
	case bytes.HasPrefix(head, []byte("\xFF\xD8\xFF")):
		return MimeJPEG
	case bytes.HasPrefix(head, []byte("II*\x00")), bytes.HasPrefix(head, []byte("MM\x00*")):
		return MimeTIFF
	case len(head) >= 12 && bytes.HasPrefix(head, []byte("RIFF")) && string(head[8:12]) == "WEBP":
		return MimeWebP
	}
	return ""
}
