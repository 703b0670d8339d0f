package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/mq/redisstream"
	"github.com/ragent-go/ragent/service"
	"golang.org/x/text/encoding/simplifiedchinese"
)

// These tests drive ingestion end to end through HTTP on in-process
// instances: upload → outbox → relay → MQ (Redis Streams here; RocketMQ in
// ingest_rocketmq_test.go) → consume guard → parse, chunk, embed, index.

type searchHit struct {
	ChunkID    string `json:"chunkId"`
	DocumentID string `json:"documentId"`
	Content    string `json:"content"`
}

func (c *client) search(kbID, query, mode string) []searchHit {
	c.t.Helper()
	r := c.do("POST", "/api/v1/search", map[string]any{"query": query, "knowledgeBaseIds": []string{kbID}, "mode": mode, "topK": 10})
	if r.Status != http.StatusOK {
		c.t.Fatalf("search %q: %d %s", query, r.Status, r.Body)
	}
	var out struct{ Results []searchHit }
	r.json(c.t, &out)
	return out.Results
}

func hasDocument(hits []searchHit, docID string) bool {
	for _, h := range hits {
		if h.DocumentID == docID {
			return true
		}
	}
	return false
}

type chunkJSON struct {
	Ordinal    int `json:"ordinal"`
	Generation int `json:"generation"`
	Content    string
}

// chunks returns every chunk row of a document.
func (c *client) chunks(docID string) []chunkJSON {
	c.t.Helper()
	return getItems[chunkJSON](c, "/api/v1/documents/"+docID+"/chunks?limit=500")
}

// workerIndexesOnce starts a worker instance of cfg and waits, up to
// timeout each, for every document to turn ready in its first generation
// with one set of chunks.
func workerIndexesOnce(t *testing.T, cfg Config, c *client, timeout time.Duration, docs ...docJSON) {
	t.Helper()
	worker := cfg
	worker.Role = "worker"
	start(t, worker)
	for _, d := range docs {
		got := c.waitDone(d.ID, timeout)
		if got.Status != "ready" || got.Generation != 1 {
			t.Fatalf("document %s: %+v", d.ID, got)
		}
		checkOneChunkSet(t, c, got)
	}
}

// checkOneChunkSet fails unless the document's chunks are one generation
// with ordinals 0..n-1, n = its chunkCount.
func checkOneChunkSet(t *testing.T, c *client, d docJSON) {
	t.Helper()
	chunks := c.chunks(d.ID)
	if len(chunks) != d.ChunkCount || len(chunks) == 0 {
		t.Fatalf("document %s: %d chunk rows, chunkCount %d", d.ID, len(chunks), d.ChunkCount)
	}
	for i, ch := range chunks {
		if ch.Ordinal != i || ch.Generation != d.Generation {
			t.Fatalf("chunk %d: ordinal %d generation %d (document generation %d)", i, ch.Ordinal, ch.Generation, d.Generation)
		}
	}
}

// ingestEnv starts one instance and returns an admin client and a fresh
// knowledge base.
func ingestEnv(t *testing.T, cfg Config) (*instance, *client, string) {
	t.Helper()
	in := start(t, cfg)
	c := in.adminClient(t)
	return in, c, c.createKB("kb-" + strings.ToLower(t.Name()[len(t.Name())-min(20, len(t.Name())):]))
}

func TestIngestFormats(t *testing.T) {
	_, c, kb := ingestEnv(t, testConfig(t))
	gbk, err := simplifiedchinese.GBK.NewEncoder().String("量子计算机利用叠加态进行并行运算，这是中文编码测试。")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		content []byte
		query   string
	}{
		{"notes.txt", []byte("Photosynthesis converts sunlight into chemical energy in chloroplasts."), "photosynthesis chloroplasts"},
		{"中文.txt", []byte("长城是中国古代的军事防御工程，绵延万里。"), "长城防御工程"},
		{"gbk.txt", []byte(gbk), "量子计算机"},
		{"guide.md", []byte("# 安装指南\n\n首先下载安装包，然后运行配置向导。\n\n## Upgrade\n\nRun the migration tool before upgrading."), "配置向导"},
		{"page.html", []byte(`<html><head><style>.x{color:red}</style><script>var hiddenScriptWord = 1;</script></head>
			<body><h1>Volcanoes</h1><p>Magma chambers feed volcanic eruptions.</p></body></html>`), "magma eruptions"},
		{"table.csv", []byte("city,population\nReykjavik,131000\n上海,24870000\n"), "reykjavik"},
		{"report.pdf", testdocs.PDF(t, []string{"Glaciers retreat as temperatures rise.", "Meltwater raises sea levels."}), "glaciers meltwater"},
		{"memo.docx", testdocs.Docx(t, testdocs.DocxParagraph("Heading1", "季度报告")+testdocs.DocxParagraph("", "本季度销售额增长百分之二十。")), "销售额增长"},
		{"deck.pptx", testdocs.Pptx(t, testdocs.PptxSlide("Roadmap", "Launch the telescope in spring."), testdocs.PptxSlide("风险", "预算超支的风险较低。")), "telescope"},
		{"sheet.xlsx", testdocs.Xlsx(t, map[string][][]any{"Sheet1": {{"产品", "价格"}, {"咖啡机", 899}, {"Espresso grinder", 249}}}, "Sheet1"), "咖啡机"},
	}
	ids := make([]string, len(cases))
	for i, tc := range cases {
		ids[i] = c.uploadAccepted(kb, tc.name, tc.content).ID
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c.forTest(t)
			d := c.waitDone(ids[i], 60*time.Second)
			if d.Status != "ready" || d.ChunkCount == 0 {
				t.Fatalf("status %s (%q), %d chunks", d.Status, d.Error, d.ChunkCount)
			}
			if hits := c.search(kb, tc.query, "keyword"); !hasDocument(hits, d.ID) {
				t.Fatalf("keyword search %q misses the document: %+v", tc.query, hits)
			}
			if hits := c.search(kb, tc.query, "hybrid"); !hasDocument(hits, d.ID) {
				t.Fatalf("hybrid search %q misses the document", tc.query)
			}
		})
	}
	t.Run("script text is not indexed", func(t *testing.T) {
		if hits := c.search(kb, "hiddenScriptWord", "keyword"); len(hits) != 0 {
			t.Fatalf("script content searchable: %+v", hits)
		}
	})
}

func TestIngestBadInputs(t *testing.T) {
	cfg := testConfig(t)
	cfg.UploadMaxBytes = 1 << 20
	_, c, kb := ingestEnv(t, cfg)

	ole := append([]byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1}, make([]byte, 2048)...)
	cases := []struct {
		name    string
		content []byte
	}{
		{"corrupt.docx", append([]byte("PK\x03\x04"), bytes.Repeat([]byte{0x42}, 600)...)},
		{"truncated.pdf", []byte("%PDF-1.4\n1 0 obj\n<< /Type /Catalog")},
		{"empty.txt", nil},
		{"encrypted.docx", ole},
		{"program.bin", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 1024)...)},
		{"image.png", append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 512)...)},
		{"bomb.docx", zipBomb(t, 300<<20)},
		{"no-text.docx", testdocs.Docx(t, "")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c.forTest(t)
			r := c.upload(kb, tc.name, tc.content)
			if r.Status >= 400 && r.Status < 500 {
				if code := r.errorCode(t); code == "" {
					t.Fatalf("%d without an error code: %s", r.Status, r.Body)
				}
				return
			}
			if r.Status != http.StatusAccepted {
				t.Fatalf("upload: %d %s", r.Status, r.Body)
			}
			var d docJSON
			r.json(t, &d)
			d = c.waitDone(d.ID, 60*time.Second)
			if d.Status != "failed" || strings.TrimSpace(d.Error) == "" {
				t.Fatalf("status %s, error %q: want failed with a readable error", d.Status, d.Error)
			}
			if d.ChunkCount != 0 || len(c.chunks(d.ID)) != 0 {
				t.Fatalf("failed document has chunks: count %d", d.ChunkCount)
			}
		})
	}
	t.Run("oversized is 413", func(t *testing.T) {
		c := c.forTest(t)
		r := c.upload(kb, "big.txt", bytes.Repeat([]byte("word "), (2<<20)/5))
		if r.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d %s, want 413", r.Status, r.Body)
		}
	})
	t.Run("instance still healthy", func(t *testing.T) {
		c := c.forTest(t)
		d := c.waitDone(c.uploadAccepted(kb, "fine.txt", []byte("Still alive after hostile uploads.")).ID, 30*time.Second)
		if d.Status != "ready" {
			t.Fatalf("status %s %q", d.Status, d.Error)
		}
	})
}

// zipBomb is a docx whose document.xml inflates to size bytes.
func zipBomb(t *testing.T, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("[Content_Types].xml")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>`)
	w, err = zw.Create("word/document.xml")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, `<?xml version="1.0"?><w:document `+testdocs.WordNS+`><w:body><w:p><w:r><w:t>`)
	block := bytes.Repeat([]byte("a"), 1<<20)
	for n := 0; n < size; n += len(block) {
		w.Write(block)
	}
	io.WriteString(w, `</w:t></w:r></w:p></w:body></w:document>`)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestIngestLifecycle(t *testing.T) {
	cfg := testConfig(t)
	in, c, kb := ingestEnv(t, cfg)
	content := []byte("Tardigrades survive extreme dehydration by forming a tun state.")
	d := c.uploadAccepted(kb, "tardigrade.txt", content)

	t.Run("duplicate is 409 with the document id", func(t *testing.T) {
		r := c.upload(kb, "copy-of-tardigrade.txt", content)
		if r.Status != http.StatusConflict {
			t.Fatalf("status %d %s", r.Status, r.Body)
		}
		var e struct {
			Error struct {
				Details struct{ DocumentID string } `json:"details"`
			} `json:"error"`
		}
		r.json(t, &e)
		if e.Error.Details.DocumentID != d.ID {
			t.Fatalf("details.documentId %q, want %q", e.Error.Details.DocumentID, d.ID)
		}
	})

	ready := c.waitDone(d.ID, 30*time.Second)
	if ready.Status != "ready" {
		t.Fatalf("status %s %q", ready.Status, ready.Error)
	}

	t.Run("reindex ends ready with the next generation", func(t *testing.T) {
		r := c.do("POST", "/api/v1/documents/"+d.ID+"/reindex", nil)
		if r.Status != http.StatusAccepted {
			t.Fatalf("reindex: %d %s", r.Status, r.Body)
		}
		got := c.waitDone(d.ID, 30*time.Second)
		if got.Status != "ready" || got.Generation != 2 {
			t.Fatalf("after reindex: %+v", got)
		}
		checkOneChunkSet(t, c, got)
		if !hasDocument(c.search(kb, "tardigrades dehydration", "keyword"), d.ID) {
			t.Fatal("reindexed document not searchable")
		}
	})

	t.Run("delete removes it from search", func(t *testing.T) {
		if r := c.do("DELETE", "/api/v1/documents/"+d.ID, nil); r.Status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		for _, mode := range []string{"keyword", "vector", "hybrid"} {
			if hasDocument(c.search(kb, "tardigrades dehydration tun state", mode), d.ID) {
				t.Fatalf("%s search still finds the deleted document", mode)
			}
		}
		if r := c.do("GET", "/api/v1/documents/"+d.ID, nil); r.Status != http.StatusNotFound {
			t.Fatalf("get deleted: %d", r.Status)
		}
	})

	t.Run("anonymous upload is 401", func(t *testing.T) {
		r := in.client(t, "").upload(kb, "anon.txt", []byte("nobody"))
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("status %d %s", r.Status, r.Body)
		}
	})
}

func TestUploadConcurrencyCap(t *testing.T) {
	cfg := testConfig(t)
	cfg.UploadMaxConcurrent = 1
	cfg.UploadMaxWait = 300 * time.Millisecond
	_, c, kb := ingestEnv(t, cfg)

	// The first upload holds the only permit while its body trickles in.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	req, _ := http.NewRequest("POST", c.base+"/api/v1/knowledge-bases/"+kb+"/documents", pr)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	first := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	part, _ := mw.CreateFormFile("file", "slow.txt")
	part.Write([]byte("The slow upload holds the permit. "))

	// Wait until the server holds the permit, watching the semaphore in
	// Redis. Probing with uploads instead raced the first request: a probe
	// that took the permit first made the slow upload wait, and under load
	// time out with 429 itself (and identical probe bytes were refused as
	// duplicates once one got in).
	rdb := testenv.Redis(t)
	permits := cfg.RedisPrefix + "{limiter:upload}:permits"
	testenv.Eventually(t, 30*time.Second, "the slow upload to take the upload permit", func() bool {
		return rdb.ZCard(context.Background(), permits).Val() >= 1
	})
	r := c.upload(kb, "second.txt", []byte("A second upload while the first holds the only permit."))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("second upload: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	part.Write([]byte("Done now."))
	mw.Close()
	pw.Close()
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("first upload: %d", code)
	}
	// The permit is back.
	c.uploadAccepted(kb, "third.txt", []byte("The permit returned after the slow upload finished."))
}

// TestIngestSameMessageFiveTimes publishes the ingest message of a pending
// document five more times before any worker runs; the worker must build one
// set of chunks.
func TestIngestSameMessageFiveTimes(t *testing.T) {
	cfg := testConfig(t)
	cfg.Role = "api" // no consumer yet: messages pile up in the stream
	_, c, kb := ingestEnv(t, cfg)
	d := c.uploadAccepted(kb, "redelivered.txt", []byte(strings.Repeat("Octopuses have three hearts and blue blood. ", 200)))

	rdb := testRedis(t, cfg)
	publishFiveTimes(t, redisstream.NewProducer(rdb, redisstream.ProducerConfig{Prefix: cfg.RedisPrefix}), d.ID)

	workerIndexesOnce(t, cfg, c, 60*time.Second, d)
	// Late deliveries must not add chunks after ready either.
	time.Sleep(time.Second)
	checkOneChunkSet(t, c, c.document(d.ID))
}

func publishFiveTimes(t *testing.T, p mq.Producer, docID string) {
	t.Helper()
	id, err := service.ParseID(docID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(service.IngestMessage{DocumentID: id, Generation: 1})
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.Publish(ctx, service.IngestTopic, fmt.Sprintf("%s:1", docID), body)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestIngestWorkerKilledMidDocument stops a worker while it indexes a large
// document; the message stays unacknowledged and a second worker finishes
// the document after the visibility timeout.
func TestIngestWorkerKilledMidDocument(t *testing.T) {
	cfg := testConfig(t)
	cfg.Role = "api"
	cfg.MQVisibilityTimeout = 2 * time.Second
	_, c, kb := ingestEnv(t, cfg)

	worker := cfg
	worker.Role = "worker"
	worker.InstanceID = "worker-a"
	a := start(t, worker)

	var big strings.Builder
	for i := 0; big.Len() < 1<<20; i++ {
		fmt.Fprintf(&big, "Paragraph %d describes coral reef ecosystem number %d in detail.\n\n", i, i*7)
	}
	d := c.uploadAccepted(kb, "big.txt", []byte(big.String()))
	testenv.Eventually(t, 30*time.Second, "the document to start running", func() bool {
		return c.document(d.ID).Status == "running"
	})
	a.stop()
	if st := c.document(d.ID).Status; st != "running" && st != "pending" {
		// The worker finished before it was stopped: the test proves nothing.
		t.Fatalf("worker finished before the kill (status %s); make the document larger", st)
	}

	worker.InstanceID = "worker-b"
	start(t, worker)
	got := c.waitDone(d.ID, 90*time.Second)
	if got.Status != "ready" {
		t.Fatalf("after redelivery: %+v", got)
	}
	if got.ChunkCount < 2 {
		t.Fatalf("%d chunks", got.ChunkCount)
	}
	chunks := c.chunks(d.ID)
	if len(chunks) != min(got.ChunkCount, 500) {
		t.Fatalf("%d chunk rows (first page), chunkCount %d", len(chunks), got.ChunkCount)
	}
	if !hasDocument(c.search(kb, "coral reef ecosystem", "keyword"), d.ID) {
		t.Fatal("not searchable")
	}
}

// TestUploadPermitIDsAreServerGenerated sends 15 concurrent uploads that
// share one X-Request-ID against a cap of 10: the permit ids are the
// server's, so 10 run and 5 are refused, and no more than 10 permits are
// ever held.
func TestUploadPermitIDsAreServerGenerated(t *testing.T) {
	const (
		cap     = 10
		uploads = 15
	)
	cfg := testConfig(t)
	cfg.UploadMaxConcurrent = cap
	cfg.UploadMaxWait = 500 * time.Millisecond
	_, c, kb := ingestEnv(t, cfg)
	rdb := testRedis(t, cfg)
	permits := cfg.RedisPrefix + "{limiter:upload}:permits"

	type upload struct {
		pw     *io.PipeWriter
		mw     *multipart.Writer
		part   chan io.Writer
		status chan int
	}
	all := make([]*upload, uploads)
	for i := range all {
		pr, pw := io.Pipe()
		u := &upload{pw: pw, mw: multipart.NewWriter(pw), part: make(chan io.Writer, 1), status: make(chan int, 1)}
		all[i] = u
		req, _ := http.NewRequest("POST", c.base+"/api/v1/knowledge-bases/"+kb+"/documents", pr)
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", u.mw.FormDataContentType())
		req.Header.Set("X-Request-ID", "one-id-for-all-uploads")
		go func() {
			resp, err := http.DefaultClient.Do(req)
			code := 0
			if err == nil {
				resp.Body.Close()
				code = resp.StatusCode
			}
			// A refused upload is answered before its body is read: stop
			// writing it.
			pr.CloseWithError(io.ErrClosedPipe)
			u.status <- code
		}()
		go func() {
			part, _ := u.mw.CreateFormFile("file", fmt.Sprintf("held-%d.txt", i))
			_, _ = part.Write([]byte(fmt.Sprintf("Upload %d holds its permit while its body trickles in. ", i)))
			u.part <- part
		}()
	}

	// Five are refused after the wait (the server answers them once their
	// bodies end); the other ten hold permits meanwhile.
	refusals := func() string {
		r := c.do("GET", "/metrics", nil)
		for _, line := range strings.Split(string(r.Body), "\n") {
			if strings.HasPrefix(line, `ratelimit_rejections_total{limiter="upload",reason="timeout"}`) {
				return line[strings.LastIndex(line, " ")+1:]
			}
		}
		return ""
	}
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d upload refusals", uploads-cap), func() bool {
		if n := rdb.ZCard(t.Context(), permits).Val(); n > cap {
			t.Fatalf("%d upload permits held, cap %d", n, cap)
		}
		return refusals() == fmt.Sprint(uploads-cap)
	})
	if n := rdb.ZCard(t.Context(), permits).Val(); n != cap {
		t.Fatalf("%d upload permits held, want %d", n, cap)
	}

	// Every body ends: the ten holders are accepted, the five refused.
	var wg sync.WaitGroup
	for i, u := range all {
		wg.Go(func() {
			select {
			case part := <-u.part:
				_, _ = part.Write([]byte(fmt.Sprintf("Its unique end: %d.", i)))
				u.mw.Close()
			case code := <-u.status: // answered before its body was written
				u.status <- code
			}
			u.pw.Close()
		})
	}
	wg.Wait()
	accepted, refused := 0, 0
	for i, u := range all {
		switch code := <-u.status; code {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Errorf("upload %d: %d", i, code)
		}
	}
	if accepted != cap || refused != uploads-cap {
		t.Errorf("%d uploads accepted and %d refused, want %d and %d", accepted, refused, cap, uploads-cap)
	}
	if n := rdb.ZCard(t.Context(), permits).Val(); n != 0 {
		t.Errorf("%d upload permits left after the uploads ended", n)
	}
}
