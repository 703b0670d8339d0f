package parse

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// TestMain lets the test binary stand in for `ragent parse`: ChildParser
// tests start os.Args[0] with childArg, and the child runs ServeChild, or
// misbehaves on purpose the way a hostile file could make a parser
// misbehave.
func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == childArg {
		os.Exit(runTestChild(os.Args[2]))
	}
	os.Exit(m.Run())
}

const childArg = "ragent-test-parse-child"

// hogged keeps what the "hog" child allocates reachable.
var hogged [][]byte

func runTestChild(mode string) int {
	if mode == "serve" {
		if err := ServeChild(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if mode == "parent-of-spinner" {
		// A worker with a child stuck in a parse, about to be SIGKILLed.
		p := &ChildParser{Command: []string{os.Args[0], childArg, "spin"}}
		go p.Parse(context.Background(), []byte("x"), MimeText, Limits{Timeout: time.Hour})
		for {
			if pids := childrenOf(os.Getpid()); len(pids) > 0 {
				fmt.Println(pids[0])
				select {}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The other modes read one request, then misbehave the way a hostile
	// file could make a parser misbehave.
	br := bufio.NewReader(os.Stdin)
	line, err := br.ReadBytes('\n')
	var req childRequest
	if err != nil || json.Unmarshal(line, &req) != nil {
		return 2
	}
	io.CopyN(io.Discard, br, req.Size)
	switch mode {
	case "spin": // a parser looping inside a library, ignoring every deadline
		for n := 0; ; n++ {
			_ = n
		}
	case "hog": // a parser allocating without bound
		for {
			b := make([]byte, 8<<20)
			for i := range b {
				b[i] = byte(i)
			}
			hogged = append(hogged, b)
		}
	case "crash": // a runtime fatal error: recover() cannot stop it
		m := map[int]int{}
		for i := 0; i < 4; i++ {
			go func() {
				for j := 0; ; j++ {
					m[j] = j
				}
			}()
		}
		select {}
	}
	return 3
}

// testChild returns a ChildParser whose children run mode; its idle
// children end with the test.
func testChild(t *testing.T, mode string) *ChildParser {
	p := &ChildParser{Command: []string{os.Args[0], childArg, mode}, Poll: 10 * time.Millisecond}
	t.Cleanup(func() { p.Close() })
	return p
}

// pdfLibraryGoroutines counts goroutines running inside the PDF library:
// a parse abandoned at its deadline shows up here, still spinning.
func pdfLibraryGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "github.com/ledongthuc/pdf.")
}

// A page tree that loops through /Kids, and a page whose /Parent chain
// loops, are refused before the library is called: the parse fails as
// corrupt at once (not at the timeout) and leaves nothing running.
func TestParsePDFLoopsFailFast(t *testing.T) {
	cases := map[string][]byte{
		"kids loop":   testdocs.PDFKidsLoop(t),
		"parent loop": testdocs.PDFParentLoop(t),
	}
	for name, file := range cases {
		t.Run(name, func(t *testing.T) {
			// A timeout far beyond the test's own: only the pre-pass can end
			// this parse in time.
			_, err := parseBytes(t, file, MimePDF, Limits{Timeout: time.Hour})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "loops back on itself") {
				t.Fatalf("err = %v, want corrupt: loops back on itself", err)
			}
			if n := pdfLibraryGoroutines(); n != 0 {
				t.Fatalf("%d goroutines still inside the PDF library", n)
			}
		})
	}
	t.Run("a deep but finite tree is fine", func(t *testing.T) {
		// Pages nested 20 levels deep, each level one kid: legal, if odd.
		objs := []string{"<< /Type /Catalog /Pages 2 0 R >>"}
		const depth = 20
		for i := 0; i < depth; i++ {
			parent := ""
			if i > 0 {
				parent = fmt.Sprintf(" /Parent %d 0 R", i+1)
			}
			objs = append(objs, fmt.Sprintf("<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>", i+3, parent))
		}
		content := "BT /F1 12 Tf 72 720 Td (Deep page text) Tj ET"
		objs = append(objs,
			fmt.Sprintf("<< /Type /Page /Parent %d 0 R /Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>", depth+1, depth+4, depth+3),
			fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content),
			"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
		)
		doc, err := parseBytes(t, testdocs.PDFObjects(t, objs...), MimePDF, Limits{})
		if err != nil || len(doc.Blocks) != 1 || doc.Blocks[0].Text != "Deep page text" {
			t.Fatalf("doc %+v, err %v", doc, err)
		}
	})
	t.Run("page limit counts real pages", func(t *testing.T) {
		_, err := parseBytes(t, testdocs.PDF(t, []string{"one"}, []string{"two"}, []string{"three"}), MimePDF, Limits{MaxPages: 2})
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v, want too large", err)
		}
	})
}

// Every format stops at the text cap with a reason that names it, however
// the text expands: repeated paragraphs, a header row repeated on every
// table row, a shared string referenced by every cell.
func TestParseTextCap(t *testing.T) {
	const limit = 64 << 10
	para := "Lorem ipsum dolor sit amet, consectetur adipiscing elit."
	longHeader := strings.Repeat("header", 200)
	var md, csv strings.Builder
	md.WriteString("| " + longHeader + " | b |\n|---|---|\n")
	csv.WriteString(longHeader + ",b\n")
	for i := 0; i < 200; i++ {
		md.WriteString("| x | y |\n")
		csv.WriteString("x,y\n")
	}
	var html strings.Builder
	html.WriteString("<table><tr><th>" + longHeader + "</th><th>b</th></tr>")
	for i := 0; i < 200; i++ {
		html.WriteString("<tr><td>x</td><td>y</td></tr>")
	}
	html.WriteString("</table>")
	pdfPages := make([][]string, 60)
	for i := range pdfPages {
		pdfPages[i] = []string{strings.Repeat(para+" ", 25)}
	}
	cases := []struct {
		name string
		mime string
		file []byte
	}{
		{"txt", MimeText, []byte(strings.Repeat(para+"\n\n", 2000))},
		{"markdown table header", MimeMarkdown, []byte(md.String())},
		{"html table header", MimeHTML, []byte(html.String())},
		{"csv header", MimeCSV, []byte(csv.String())},
		{"docx paragraphs", MimeDOCX, testdocs.DocxRepeated(t, para, 2000)},
		{"docx one huge paragraph", MimeDOCX, testdocs.Docx(t, testdocs.DocxParagraph("", strings.Repeat(para, 2000)))},
		{"docx table", MimeDOCX, testdocs.Docx(t, testdocs.DocxTable(append([][]string{{longHeader, "b"}}, repeatRows(200, "x", "y")...)...))},
		{"pptx", MimePPTX, testdocs.PptxRepeated(t, para, 2000)},
		{"xlsx shared strings", MimeXLSX, testdocs.XlsxSharedStringsBomb(t, para, 100, 200)},
		{"pdf", MimePDF, testdocs.PDF(t, pdfPages...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseBytes(t, tc.file, tc.mime, Limits{MaxTextBytes: limit})
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, service.ErrTooLarge) || !strings.Contains(err.Error(), "text exceeds the limit of 64 KiB") {
				t.Fatalf("err = %v, want the text cap", err)
			}
			// The same file is fine under a cap it fits in.
			doc, err := parseBytes(t, tc.file, tc.mime, Limits{MaxTextBytes: 64 << 20})
			if err != nil || doc.size <= limit {
				t.Fatalf("under a large cap: %v, %d bytes of text", err, docSize(doc))
			}
		})
	}
}

func repeatRows(n int, cells ...string) [][]string {
	rows := make([][]string, n)
	for i := range rows {
		rows[i] = cells
	}
	return rows
}

func docSize(d *Text) int64 {
	if d == nil {
		return 0
	}
	return d.size
}

func TestChildParser(t *testing.T) {
	ctx := context.Background()
	t.Run("same blocks as in process", func(t *testing.T) {
		file := testdocs.Docx(t, testdocs.DocxParagraph("Heading1", "季度报告")+testdocs.DocxParagraph("", "本季度销售额增长。")+
			testdocs.DocxTable([]string{"产品", "价格"}, []string{"咖啡机", "899"}))
		want, err := InProcess{}.Parse(ctx, file, MimeDOCX, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := testChild(t, "serve").Parse(ctx, file, MimeDOCX, Limits{})
		if err != nil || !equalBlocks(got.Blocks, want.Blocks) {
			t.Fatalf("child: %+v, %v; in process: %+v", got, err, want.Blocks)
		}
	})
	t.Run("parse failures keep their kind", func(t *testing.T) {
		_, err := testChild(t, "serve").Parse(ctx, testdocs.PDFKidsLoop(t), MimePDF, Limits{})
		if !errors.Is(err, ErrCorrupt) || !IsPermanent(err) || !errors.Is(err, service.ErrInvalid) || !strings.Contains(err.Error(), "loops back") {
			t.Fatalf("err = %v, want corrupt", err)
		}
		_, err = testChild(t, "serve").Parse(ctx, []byte("just text"), "image/gif", Limits{})
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("err = %v, want unsupported", err)
		}
	})
	t.Run("a spinning parser is killed at the timeout", func(t *testing.T) {
		_, usage, err := testChild(t, "spin").run(ctx, []byte("x"), MimeText, Limits{Timeout: 2 * time.Second})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "took longer than 2s") {
			t.Fatalf("err = %v, want the timeout", err)
		}
		assertGone(t, usage.Pid)
	})
	t.Run("a parser that allocates without bound is killed at the memory cap", func(t *testing.T) {
		p := testChild(t, "hog")
		p.MemoryLimit = 128 << 20
		_, usage, err := p.run(ctx, []byte("x"), MimeText, Limits{Timeout: time.Minute})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 128 MiB of memory") {
			t.Fatalf("err = %v, want the memory cap", err)
		}
		assertGone(t, usage.Pid)
	})
	t.Run("a crash is a corrupt file, not a dead worker", func(t *testing.T) {
		_, _, err := testChild(t, "crash").run(ctx, []byte("x"), MimeText, Limits{Timeout: time.Minute})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "crashed") {
			t.Fatalf("err = %v, want a crash", err)
		}
	})
	t.Run("the caller's cancellation is not the file's fault", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		_, _, err := testChild(t, "spin").run(cctx, []byte("x"), MimeText, Limits{Timeout: time.Minute})
		if !errors.Is(err, context.Canceled) || IsPermanent(err) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("a healthy child is reused, a killed one never", func(t *testing.T) {
		p := testChild(t, "serve")
		_, first, err := p.run(ctx, []byte("one"), MimeText, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		// A parse failure is an answer: the child stays healthy.
		_, second, err := p.run(ctx, testdocs.PDFKidsLoop(t), MimePDF, Limits{})
		if !errors.Is(err, ErrCorrupt) || second.Pid != first.Pid {
			t.Fatalf("second parse: pid %d (first %d), %v; want the same child and a corrupt file", second.Pid, first.Pid, err)
		}
		if _, third, err := p.run(ctx, []byte("three"), MimeText, Limits{}); err != nil || third.Pid != first.Pid {
			t.Fatalf("third parse: pid %d, %v", third.Pid, err)
		}
		p.Close()
		assertGone(t, first.Pid)
	})
	t.Run("a child is replaced after MaxUses parses", func(t *testing.T) {
		p := testChild(t, "serve")
		p.MaxUses = 1
		_, first, err1 := p.run(ctx, []byte("one"), MimeText, Limits{})
		_, second, err2 := p.run(ctx, []byte("two"), MimeText, Limits{})
		if err1 != nil || err2 != nil || first.Pid == second.Pid {
			t.Fatalf("pids %d, %d (%v, %v): want two children", first.Pid, second.Pid, err1, err2)
		}
		assertGone(t, first.Pid)
	})
	t.Run("a missing program is a transient failure", func(t *testing.T) {
		p := &ChildParser{Command: []string{"/nonexistent/ragent", "parse"}}
		if _, err := p.Parse(ctx, []byte("x"), MimeText, Limits{}); err == nil || IsPermanent(err) {
			t.Fatalf("err = %v, want a transient error", err)
		}
	})
}

// A worker killed outright (OOM killer, SIGKILL) takes its parser
// processes with it, even one spinning in a parse.
func TestChildDiesWithItsWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel kills children with their parent only on Linux")
	}
	worker := exec.Command(os.Args[0], childArg, "parent-of-spinner")
	out, err := worker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Fscan(out, &child); err != nil {
		worker.Process.Kill()
		t.Fatalf("no child pid from the worker: %v", err)
	}
	worker.Process.Kill()
	worker.Wait()
	// The kernel signals the child when the worker dies; it is gone once
	// its parent (now init or a subreaper) has reaped it.
	defer func() {
		if processAlive(child) { // the test failed: do not leave it spinning
			syscall.Kill(child, syscall.SIGKILL)
		}
	}()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("parser process %d to die with its worker", child), func() bool {
		return !processAlive(child)
	})
}

// processAlive reports whether pid runs (a zombie awaiting its reaper
// counts as gone: it runs nothing).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) >= 2 && fields[1] == strconv.Itoa(ppid) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// The DOCX bomb of the hardening issue: a few hundred kilobytes holding
// tens of megabytes of text. With the default limits it fails at the text
// cap, and the child that parsed it never used much memory doing so.
//
// Under the race detector the parse is twenty times slower, so the cap and
// the file shrink tenfold; the memory bound is what the normal run checks.
func TestChildParserDocxBombMemory(t *testing.T) {
	limits, paragraphs, capText := Limits{}, 1_000_000, "20 MiB"
	if testenv.Race {
		limits, paragraphs, capText = Limits{MaxTextBytes: 2 << 20}, 100_000, "2 MiB"
	}
	file := testdocs.DocxRepeated(t, "Lorem ipsum dolor sit amet, consectetur adipiscing elit.", paragraphs)
	t.Logf("docx of %d KiB", len(file)>>10)
	_, usage, err := testChild(t, "serve").run(context.Background(), file, MimeDOCX, limits)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "text exceeds the limit of "+capText) {
		t.Fatalf("err = %v, want the text cap", err)
	}
	t.Logf("child peak RSS %d MiB in %s", usage.MaxRSS>>20, usage.Elapsed)
	if usage.MaxRSS <= 0 || usage.MaxRSS > 512<<20 {
		t.Fatalf("child peak RSS %d MiB, want under 512 MiB", usage.MaxRSS>>20)
	}
}

func equalBlocks(a, b []Block) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// assertGone checks that a child process no longer exists (it was killed
// and reaped, not left running).
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatal("no child pid recorded")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("child %d still exists: kill(0) = %v", pid, err)
	}
}
