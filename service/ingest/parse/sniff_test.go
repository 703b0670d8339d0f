package parse

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/text/encoding/unicode"

	"github.com/ragent-go/ragent/internal/testdocs"
)

func TestSniff(t *testing.T) {
	pdf := testdocs.PDF(t, []string{"x"})
	docx := testdocs.Docx(t, testdocs.DocxParagraph("", "x"))
	pptx := testdocs.Pptx(t, testdocs.PptxSlide("t", "x"))
	xlsx := testdocs.Xlsx(t, map[string][][]any{"S": {{"a"}}}, "S")
	plainZip := testdocs.Zip(t, [2]string{"readme.txt", "hello"})
	gbkText := gbk(t, "中文内容，GBK 编码的文本文件。")
	tests := []struct {
		name     string
		data     []byte
		filename string
		want     string
		wantErr  error
	}{
		{"pdf by content despite name", pdf, "report.txt", MimePDF, nil},
		{"docx", docx, "a.bin", MimeDOCX, nil},
		{"pptx", pptx, "", MimePPTX, nil},
		{"xlsx", xlsx, "book.xlsx", MimeXLSX, nil},
		{"markdown by extension", []byte("# Title\n\ntext"), "README.MD", MimeMarkdown, nil},
		{"csv by extension", []byte("a,b\n1,2"), "data.csv", MimeCSV, nil},
		{"html by extension", []byte("<p>hi</p>"), "page.htm", MimeHTML, nil},
		{"html by content", []byte("\xEF\xBB\xBF  <!DOCTYPE html><html>"), "page", MimeHTML, nil},
		{"plain text", []byte("just text"), "notes", MimeText, nil},
		{"gbk text", gbkText, "notes.txt", MimeText, nil},
		{"gbk cut mid-character", gbkText[:len(gbkText)-1], "notes.txt", MimeText, nil},
		{"utf-8 cut mid-character", []byte("中文")[:5], "a.txt", MimeText, nil},
		{"utf-16 text", utf16(t, "hello 你好", unicode.LittleEndian), "a.txt", MimeText, nil},
		{"text named like a docx is still text", []byte("plain"), "fake.docx", MimeText, nil},
		{"empty", nil, "a.txt", "", ErrEmpty},
		{"white space only", []byte(" \r\n\t "), "a.txt", "", ErrEmpty},
		{"ole", append([]byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1}, make([]byte, 100)...), "secret.docx", "", ErrEncrypted},
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00"), "a.txt", MimePNG, nil},
		{"jpeg", []byte("\xFF\xD8\xFF\xE0\x00\x10JFIF"), "scan", MimeJPEG, nil},
		{"tiff little-endian", []byte("II*\x00\x08\x00\x00\x00"), "a.tif", MimeTIFF, nil},
		{"tiff big-endian", []byte("MM\x00*\x00\x00\x00\x08"), "a.tif", MimeTIFF, nil},
		{"webp", []byte("RIFF\x24\x00\x00\x00WEBPVP8 "), "a.webp", MimeWebP, nil},
		{"riff that is no webp", []byte("RIFF\x24\x00\x00\x00WAVEfmt "), "a.wav", "", ErrUnsupported},
		{"gif", []byte("GIF89a\x01\x00"), "a.gif", "", ErrUnsupported},
		{"binary with NULs", []byte("abc\x00\x01\x02def"), "a.txt", "", ErrUnsupported},
		{"control characters", bytes.Repeat([]byte("a\x01\x02\x03"), 10), "a.txt", "", ErrUnsupported},
		{"zip that is no office file", plainZip, "a.zip", "", ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Sniff(tt.data, tt.filename)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Sniff = %q, %v; want %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Sniff = %q, %v; want %q", got, err, tt.want)
			}
			got, err = SniffReaderAt(bytes.NewReader(tt.data), int64(len(tt.data)), tt.filename)
			if err != nil || got != tt.want {
				t.Fatalf("SniffReaderAt = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestSniffReaderAtReadsTheCentralDirectory(t *testing.T) {
	// The Office folder comes after a large first entry, out of Sniff's view.
	big := bytes.Repeat([]byte("x"), 2*SniffLen)
	var entries [][2]string
	entries = append(entries, [2]string{"[Content_Types].xml", string(big)})
	entries = append(entries, [2]string{"xl/workbook.xml", "<workbook/>"})
	data := testdocs.Zip(t, entries...)
	if got, err := SniffReaderAt(bytes.NewReader(data), int64(len(data)), "upload"); err != nil || got != MimeXLSX {
		t.Fatalf("SniffReaderAt = %q, %v; want %q", got, err, MimeXLSX)
	}
	if _, err := SniffReaderAt(bytes.NewReader(data[:200]), 200, "upload"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated zip: err = %v, want ErrCorrupt", err)
	}
}
