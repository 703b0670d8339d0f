package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service/ingest/parse"
)

// Hostile files through the whole pipeline: each ends `failed` with a reason
// that names what was wrong, in bounded time and memory, and leaves nothing
// running behind it; the instance keeps ingesting ordinary files.

// createKBWith creates a knowledge base with a chunk size.
func (c *client) createKBWith(name string, chunkSize int) string {
	c.t.Helper()
	r := c.do("POST", "/api/v1/knowledge-bases", map[string]any{"name": name, "chunkSize": chunkSize, "chunkOverlap": 0})
	if r.Status != http.StatusCreated {
		c.t.Fatalf("create knowledge base: %d %s", r.Status, r.Body)
	}
	var kb struct{ ID string }
	r.json(c.t, &kb)
	return kb.ID
}

// parserChildren lists the live `parse` processes this test process started
// (directly: the instance runs in process).
func parserChildren() []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) || fields[0] == "Z" {
			continue
		}
		dir := filepath.Dir(f)
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		args := bytes.Split(cmdline, []byte{0})
		if len(args) >= 2 && string(args[1]) == "parse" {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			pids = append(pids, pid)
		}
	}
	return pids
}

// memorySampler records the peak heap of this process (the instance, in
// process) and the peak resident memory of its parser processes while a
// test ingests.
type memorySampler struct {
	stop      chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	heapPeak  uint64
	childPeak int64
}

func sampleMemory() *memorySampler {
	s := &memorySampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			var child int64
			for _, pid := range parserChildren() {
				child = max(child, parse.PeakRSS(pid))
			}
			s.mu.Lock()
			s.heapPeak = max(s.heapPeak, ms.HeapInuse)
			s.childPeak = max(s.childPeak, child)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *memorySampler) peaks() (heap uint64, child int64) {
	close(s.stop)
	<-s.done
	return s.heapPeak, s.childPeak
}

func TestIngestHostileFiles(t *testing.T) {
	cfg := testConfig(t)
	cfg.IngestMaxChunks = 500
	// Under the race detector parsing is twenty times slower: the bombs and
	// the text cap shrink tenfold. The memory bound is checked without it.
	bombParagraphs, capText := 1_000_000, "20 MiB"
	if testenv.Race {
		cfg.IngestMaxTextBytes, bombParagraphs, capText = 2<<20, 100_000, "2 MiB"
	}
	in, c, kb := ingestEnv(t, cfg)
	lorem := "Lorem ipsum dolor sit amet, consectetur adipiscing elit."

	cases := []struct {
		name, reason string
		content      []byte
	}{
		{"kids-loop.pdf", "page tree loops back on itself", testdocs.PDFKidsLoop(t)},
		{"parent-loop.pdf", "/Parent chain loops back on itself", testdocs.PDFParentLoop(t)},
		{"bomb.docx", "text exceeds the limit of " + capText, testdocs.DocxRepeated(t, lorem, bombParagraphs)},
		{"bomb.pptx", "text exceeds the limit of " + capText, testdocs.PptxRepeated(t, lorem, bombParagraphs)},
		{"shared-strings.xlsx", "text exceeds the limit of " + capText, testdocs.XlsxSharedStringsBomb(t, lorem, 20_000, bombParagraphs/50)},
		{"many-chunks.md", "more than 500 chunks", []byte(strings.Repeat("## Section\n\n"+lorem+"\n\n", 600))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c.forTest(t)
			t.Logf("%s: %d KiB", tc.name, len(tc.content)>>10)
			mem := sampleMemory()
			start := time.Now()
			d := c.waitDone(c.uploadAccepted(kb, tc.name, tc.content).ID, 90*time.Second)
			heap, child := mem.peaks()
			t.Logf("%s: %s %q in %s; peak heap %d MiB, parser peak RSS %d MiB", tc.name, d.Status, d.Error,
				time.Since(start).Round(time.Millisecond), heap>>20, child>>20)
			if d.Status != "failed" || !strings.Contains(d.Error, tc.reason) {
				t.Fatalf("status %s, error %q; want failed: %s", d.Status, d.Error, tc.reason)
			}
			if d.ChunkCount != 0 || len(c.chunks(d.ID)) != 0 {
				t.Fatalf("failed document has %d chunks", d.ChunkCount)
			}
			if heap > 1<<30 || child > 1<<30 {
				t.Fatalf("peak heap %d MiB, parser peak RSS %d MiB: want both under 1 GiB", heap>>20, child>>20)
			}
			// Nothing of the parse runs in the worker itself.
			if n := pdfLibraryGoroutines(); n != 0 {
				t.Fatalf("%d goroutines inside the PDF library", n)
			}
		})
	}

	// A 40,000-letter word (random letters, which Postgres cannot compress
	// into an index row) in a knowledge base with big chunks, so that the
	// chunker does not cut the word into pieces small enough to fit: the
	// word is dropped at tokenization and the document is ready at once.
	t.Run("a 40,000-letter word", func(t *testing.T) {
		c := c.forTest(t)
		big := c.createKBWith("big-chunks", 4096)
		word := testdocs.LongWord(40_000)
		d := c.waitDone(c.uploadAccepted(big, "long-word.txt", []byte("Photosynthesis happens first. "+word+" and chlorophyll afterwards.")).ID, 60*time.Second)
		if d.Status != "ready" {
			t.Fatalf("status %s %q, want ready", d.Status, d.Error)
		}
		if hits := c.search(big, "chlorophyll", "keyword"); !hasDocument(hits, d.ID) {
			t.Fatalf("the words around the long one are not searchable: %+v", hits)
		}
		// Queries follow the same rule: an overlong word in a query (the API
		// takes 2,000 characters) matches nothing and breaks nothing.
		if hits := c.search(big, word[:300], "keyword"); len(hits) != 0 {
			t.Fatalf("searching an overlong word found %d hits", len(hits))
		}
	})

	t.Run("instance still ingests", func(t *testing.T) {
		c := c.forTest(t)
		c.waitReady(c.uploadAccepted(kb, "fine.pdf", testdocs.PDF(t, []string{"Still parsing after hostile uploads."})).ID)
	})

	// Parser processes are kept between parses (a killed one never is); the
	// instance's shutdown ends them all.
	t.Run("no parser process outlives the instance", func(t *testing.T) {
		if len(parserChildren()) == 0 {
			t.Fatal("no parser process found while the instance runs: is the test looking at the right processes?")
		}
		in.stop()
		if pids := parserChildren(); len(pids) != 0 {
			t.Fatalf("parser processes still running after shutdown: %v", pids)
		}
	})
}

// The loop checks do not depend on the parser process: parsing in process
// refuses the looping trees just as fast and leaves no goroutine spinning.
func TestIngestHostilePDFInProcess(t *testing.T) {
	cfg := testConfig(t)
	cfg.IngestParser = "inprocess"
	_, c, kb := ingestEnv(t, cfg)
	for name, content := range map[string][]byte{"kids-loop.pdf": testdocs.PDFKidsLoop(t), "parent-loop.pdf": testdocs.PDFParentLoop(t)} {
		t.Run(name, func(t *testing.T) {
			c := c.forTest(t)
			d := c.waitDone(c.uploadAccepted(kb, name, content).ID, 60*time.Second)
			if d.Status != "failed" || !strings.Contains(d.Error, "loops back on itself") {
				t.Fatalf("status %s %q, want failed: loops back on itself", d.Status, d.Error)
			}
			if n := pdfLibraryGoroutines(); n != 0 {
				t.Fatalf("%d goroutines still inside the PDF library", n)
			}
		})
	}
}

// pdfLibraryGoroutines counts goroutines running inside the PDF library: a
// parse abandoned at its deadline shows up here, still spinning.
func pdfLibraryGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "github.com/ledongthuc/pdf.")
}
