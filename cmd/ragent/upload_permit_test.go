package main

import (
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/redis/go-redis/v9"
)

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
	opt, _ := redis.ParseURL(cfg.RedisURL)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
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
