package parse

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/service"
)

func parseBytes(t *testing.T, data []byte, mime string, limits Limits) (*Text, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Parse(ctx, bytes.NewReader(data), int64(len(data)), mime, limits)
}

func h(level int, text string) Block { return Block{Kind: Heading, Level: level, Text: text} }
func p(text string) Block            { return Block{Kind: Paragraph, Text: text} }
func li(text string) Block           { return Block{Kind: ListItem, Text: text} }
func tr(text string) Block           { return Block{Kind: TableRow, Text: text} }
func code(text string) Block         { return Block{Kind: Code, Text: text} }

func gbk(t *testing.T, s string) []byte {
	t.Helper()
	b, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func utf16(t *testing.T, s string, bo unicode.Endianness) []byte {
	t.Helper()
	b, err := unicode.UTF16(bo, unicode.UseBOM).NewEncoder().Bytes([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseFormats(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		mime string
		want []Block
	}{
		{
			name: "plain text utf-8",
			data: []byte("First paragraph\nstill first.\n\n第二段。\n"),
			mime: MimeText,
			want: []Block{p("First paragraph\nstill first."), p("第二段。")},
		},
		{
			name: "plain text with BOM and CRLF",
			data: []byte("\xEF\xBB\xBFHello\r\n\r\nWorld"),
			mime: MimeText,
			want: []Block{p("Hello"), p("World")},
		},
		{
			name: "GBK text",
			data: gbk(t, "检索增强生成。\n\n中文段落，GBK 编码。"),
			mime: MimeText,
			want: []Block{p("检索增强生成。"), p("中文段落，GBK 编码。")},
		},
		{
			name: "UTF-16LE text",
			data: utf16(t, "小端 UTF-16 text", unicode.LittleEndian),
			mime: MimeText,
			want: []Block{p("小端 UTF-16 text")},
		},
		{
			name: "UTF-16BE text",
			data: utf16(t, "大端 text", unicode.BigEndian),
			mime: MimeText,
			want: []Block{p("大端 text")},
		},
		{
			name: "markdown",
			data: []byte("# 标题 Title #\n\nIntro with **bold** and a [link](http://x).\n\n## Install\n\n- one\n- two\n  continued\n1. first\n\n```go\nfunc main() {\n\n}\n```\n\n| name | 年龄 |\n|---|---:|\n| Alice | 30 |\n| 张三 | 25 |\n\nSetext\n======\n\n> quoted text\n\n---\nafter rule\n"),
			mime: MimeMarkdown,
			want: []Block{
				h(1, "标题 Title"), p("Intro with bold and a link."), h(2, "Install"),
				li("one"), li("two continued"), li("first"),
				code("func main() {\n\n}"),
				tr("name: Alice; 年龄: 30"), tr("name: 张三; 年龄: 25"),
				h(1, "Setext"), p("quoted text"), p("after rule"),
			},
		},
		{
			name: "html",
			data: []byte(`<!DOCTYPE html><html><head><title>T</title><style>p{color:red}</style><script>var x = "secret";</script></head>
<body><nav>menu</nav><h1>Main  title</h1><p>First
paragraph with <b>bold</b>.</p><div>Div text<p>nested para</p>tail</div>
<ul><li>item one</li><li>item <i>two</i></li></ul><h2>表格</h2>
<table><thead><tr><th>城市</th><th>人口</th></tr></thead><tbody><tr><td>北京</td><td>2189万</td></tr></tbody></table>
<pre>code  line 1
  line 2</pre><p>line<br>break</p><noscript>no</noscript></body></html>`),
			mime: MimeHTML,
			want: []Block{
				h(1, "Main title"), p("First paragraph with bold."), p("Div text"), p("nested para"), p("tail"),
				li("item one"), li("item two"), h(2, "表格"), tr("城市: 北京; 人口: 2189万"),
				code("code  line 1\n  line 2"), p("line\nbreak"),
			},
		},
		{
			name: "csv with header",
			data: []byte("name,city,note\nAlice,Paris,\"likes, commas\"\n张三,北京,\n"),
			mime: MimeCSV,
			want: []Block{tr("name: Alice; city: Paris; note: likes, commas"), tr("name: 张三; city: 北京")},
		},
		{
			name: "csv without header, semicolons, GBK",
			data: gbk(t, "1;北京;2189\n2;上海;2487\n"),
			mime: MimeCSV,
			want: []Block{tr("1 | 北京 | 2189"), tr("2 | 上海 | 2487")},
		},
		{
			name: "docx",
			data: testdocs.Docx(t, testdocs.DocxParagraph("Title", "Annual Report 年度报告")+
				testdocs.DocxParagraph("Heading1", "Overview")+
				testdocs.DocxParagraph("", "Revenue grew. 收入增长。")+
				`<w:p><w:pPr><w:numPr><w:ilvl w:val="0"/></w:numPr></w:pPr><w:r><w:t>a list item</w:t></w:r></w:p>`+
				testdocs.DocxParagraph("2", "中文标题样式")+
				testdocs.DocxParagraph("MyChapter", "Custom heading")+
				testdocs.DocxTable([]string{"Region", "Sales"}, []string{"East", "100"}, []string{"华北", "200"})+
				`<w:p><w:r><w:t>tab</w:t><w:tab/><w:t>and</w:t><w:br/><w:t>break</w:t></w:r><w:r><w:instrText>PAGE</w:instrText></w:r></w:p>`),
			mime: MimeDOCX,
			want: []Block{
				h(1, "Annual Report 年度报告"), h(1, "Overview"), p("Revenue grew. 收入增长。"),
				li("a list item"), h(2, "中文标题样式"), h(2, "Custom heading"),
				tr("Region: East; Sales: 100"), tr("Region: 华北; Sales: 200"), p("tab\tand\nbreak"),
			},
		},
		{
			name: "pptx",
			data: testdocs.Pptx(t,
				testdocs.PptxSlide("Welcome 欢迎", "First point", "第二点"),
				testdocs.PptxSlide("", "Untitled slide text"),
			),
			mime: MimePPTX,
			want: []Block{h(1, "Welcome 欢迎"), p("First point"), p("第二点"), h(1, "Slide 2"), p("Untitled slide text")},
		},
		{
			name: "xlsx",
			data: testdocs.Xlsx(t, map[string][][]any{
				"销售":    {{"产品", "数量"}, {"苹果", 3}, {"Pear", 5}},
				"Notes": {{"just one cell"}},
			}, "销售", "Notes"),
			mime: MimeXLSX,
			want: []Block{h(1, "销售"), tr("产品: 苹果; 数量: 3"), tr("产品: Pear; 数量: 5"), h(1, "Notes"), tr("just one cell")},
		},
		{
			name: "pdf",
			data: testdocs.PDF(t, []string{"Hello PDF world.", "Second line"}, []string{"Page two text"}),
			mime: MimePDF,
			want: []Block{p("Hello PDF world. Second line"), p("Page two text")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := parseBytes(t, tt.data, tt.mime, Limits{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(doc.Blocks, tt.want) {
				t.Errorf("blocks:\n got %+v\nwant %+v", doc.Blocks, tt.want)
			}
		})
	}
}

func TestParseRejectsBadInput(t *testing.T) {
	garbage := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	pdf := testdocs.PDF(t, []string{"some text"})
	docx := testdocs.Docx(t, testdocs.DocxParagraph("", "hello"))

	var bomb bytes.Buffer
	zw := zip.NewWriter(&bomb)
	w, _ := zw.Create("word/document.xml")
	w.Write(bytes.Repeat([]byte("A"), 4<<20)) // 4 MiB of one byte compresses to a few KiB
	zw.Close()

	// An entry whose header understates its size, to slip past the
	// declared-size check: reading must still stop.
	var deflated bytes.Buffer
	fl, _ := flate.NewWriter(&deflated, flate.BestCompression)
	fl.Write(bytes.Repeat([]byte("<w:p/>"), 1<<20))
	fl.Close()
	var lying bytes.Buffer
	zw = zip.NewWriter(&lying)
	fw, _ := zw.CreateRaw(&zip.FileHeader{Name: "word/document.xml", Method: zip.Deflate,
		UncompressedSize64: 100, CompressedSize64: uint64(deflated.Len())})
	fw.Write(deflated.Bytes())
	zw.Close()

	many := make([][2]string, 0, 60)
	for i := range 60 {
		many = append(many, [2]string{"word/f" + string(rune('a'+i%26)) + strings.Repeat("x", i) + ".xml", "x"})
	}

	ole := append([]byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1}, make([]byte, 504)...)

	small := Limits{MaxDecompressedBytes: 1 << 20, MaxZipEntries: 50, MaxPages: 5, MaxRows: 3}
	tests := []struct {
		name string
		data []byte
		mime string
		want error
	}{
		{"empty file", nil, MimeText, ErrEmpty},
		{"only white space", []byte(" \n\t\r\n　 "), MimeText, ErrEmpty},
		{"html without text", []byte("<html><script>x()</script><style>a{}</style></html>"), MimeHTML, ErrEmpty},
		{"unknown mime", []byte("hello"), "application/x-foo", ErrUnsupported},
		{"binary garbage as text", append([]byte{0xFF}, garbage...), MimeText, ErrUnsupported},
		{"binary garbage as pdf", garbage, MimePDF, ErrCorrupt},
		{"binary garbage as docx", garbage, MimeDOCX, ErrCorrupt},
		{"binary garbage as xlsx", garbage, MimeXLSX, ErrCorrupt},
		{"truncated pdf", pdf[:len(pdf)/2], MimePDF, ErrCorrupt},
		{"pdf without %%EOF", pdf[:len(pdf)-7], MimePDF, ErrCorrupt},
		{"corrupt zip", docx[:len(docx)-30], MimeDOCX, ErrCorrupt},
		{"zip without document.xml", testdocs.Zip(t, [2]string{"a.txt", "x"}), MimeDOCX, ErrCorrupt},
		{"zip bomb", bomb.Bytes(), MimeDOCX, ErrTooLarge},
		{"zip entry lying about its size", lying.Bytes(), MimeDOCX, ErrCorrupt},
		{"too many zip entries", testdocs.Zip(t, many...), MimeDOCX, ErrTooLarge},
		{"OLE header (encrypted OOXML)", ole, MimeDOCX, ErrEncrypted},
		{"OLE header as xlsx", ole, MimeXLSX, ErrEncrypted},
		{"too many pdf pages", testdocs.PDF(t, []string{"1"}, []string{"2"}, []string{"3"}, []string{"4"}, []string{"5"}, []string{"6"}), MimePDF, ErrTooLarge},
		{"too many csv rows", []byte("a,b\n1,2\n3,4\n5,6\n7,8\n"), MimeCSV, ErrTooLarge},
		{"too many xlsx rows", testdocs.Xlsx(t, map[string][][]any{"S": {{"h"}, {1}, {2}, {3}, {4}}}, "S"), MimeXLSX, ErrTooLarge},
		{"text over the size limit", bytes.Repeat([]byte("a "), 1<<20), MimeText, ErrTooLarge},
		{"empty pptx", testdocs.Pptx(t, testdocs.PptxSlide("")), MimePPTX, ErrEmpty},
		{"empty xlsx", testdocs.Xlsx(t, map[string][][]any{"S": {}}, "S"), MimeXLSX, ErrEmpty},
		{"malformed docx xml", testdocs.Zip(t, [2]string{"word/document.xml", "<w:document><w:body><w:p>"}), MimeDOCX, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := parseBytes(t, tt.data, tt.mime, small)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, %v; want %v", doc, err, tt.want)
			}
			if !IsPermanent(err) {
				t.Errorf("IsPermanent(%v) = false", err)
			}
			if err.Error() == tt.want.Error() {
				t.Errorf("error %q says no more than the sentinel", err)
			}
		})
	}
}

func TestParseErrorsMapToServiceSentinels(t *testing.T) {
	tests := []struct {
		err, kind error
	}{
		{ErrUnsupported, service.ErrUnsupported},
		{ErrEncrypted, service.ErrUnsupported},
		{ErrTooLarge, service.ErrTooLarge},
		{ErrCorrupt, service.ErrInvalid},
		{ErrEmpty, service.ErrInvalid},
	}
	for _, tt := range tests {
		wrapped := errors.Join(errors.New("context"), tt.err)
		if !errors.Is(wrapped, tt.kind) {
			t.Errorf("%v does not match %v", tt.err, tt.kind)
		}
	}
	if IsPermanent(context.Canceled) || IsPermanent(errors.New("io")) {
		t.Error("IsPermanent is true for a transient error")
	}
}

// slowReader blocks every read until released, standing in for a parser
// stuck on a hostile file.
type slowReader struct{ release chan struct{} }

func (s slowReader) ReadAt(p []byte, off int64) (int, error) {
	if off == 0 && len(p) == 8 {
		return 0, errors.New("no magic")
	}
	<-s.release
	return 0, errors.New("released")
}

func TestParseTimeout(t *testing.T) {
	r := slowReader{release: make(chan struct{})}
	defer close(r.release)
	start := time.Now()
	_, err := Parse(context.Background(), r, 100, MimeText, Limits{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Parse returned after %s", d)
	}

	// A caller's cancellation is not the file's fault: it stays transient.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = Parse(ctx, r, 100, MimeText, Limits{Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) || IsPermanent(err) {
		t.Fatalf("err = %v, want context.Canceled and not permanent", err)
	}
}

func TestGuardRecoversPanics(t *testing.T) {
	_, err := guard(context.Background(), time.Second, time.Second, func(context.Context) (*Text, error) {
		var m map[string]int
		m["boom"]++ //lint:ignore SA5000 the panic is what this test needs
		return nil, nil
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func FuzzParseText(f *testing.F) {
	seeds := []string{
		"", "hello", "# h\n\n- a\n```\ncode", "| a | b |\n|---|---|\n| 1 | 2 |",
		"<html><body><h1>x</h1><table><tr><td>1</td></tr></table></body></html>",
		"<p><li><tr><th>", "\xff\xfe\x00", "a\n===\n", "```", "1) x\n   y", "标题\n---\n",
		strings.Repeat("<div>", 600) + "deep",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mime := range []string{MimeText, MimeMarkdown, MimeHTML, MimeCSV} {
			doc, err := Parse(context.Background(), bytes.NewReader(data), int64(len(data)), mime, Limits{})
			if err != nil {
				if !IsPermanent(err) {
					t.Fatalf("%s: non-permanent error %v", mime, err)
				}
				continue
			}
			for _, b := range doc.Blocks {
				if strings.TrimSpace(b.Text) == "" {
					t.Fatalf("%s: blank block %+v", mime, b)
				}
			}
			for _, c := range Split(doc, ChunkOptions{TargetTokens: 16, OverlapTokens: 4}) {
				if strings.TrimSpace(c.Content) == "" {
					t.Fatalf("%s: empty chunk", mime)
				}
			}
		}
	})
}

func TestParseEncryptedPDF(t *testing.T) {
	data := testdocs.PDF(t, []string{"secret"})
	data = bytes.Replace(data, []byte("/Root 1 0 R"), []byte("/Root 1 0 R /Encrypt << /Filter /Standard /V 9 /R 9 >> /ID [(a)(a)]"), 1)
	// Keep startxref pointing at the xref table: only the trailer grew.
	if _, err := parseBytes(t, data, MimePDF, Limits{}); !errors.Is(err, ErrEncrypted) {
		t.Fatalf("err = %v, want ErrEncrypted", err)
	}
}

func TestZipBudgetStopsLyingEntries(t *testing.T) {
	data := testdocs.Zip(t, [2]string{"a.xml", strings.Repeat("a", 10_000)})
	a, err := openZip(bytes.NewReader(data), int64(len(data)), Limits{MaxDecompressedBytes: 1 << 20, MaxZipEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	a.budget = 100 // as if other entries had used the rest
	rc, err := a.open("a.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}
