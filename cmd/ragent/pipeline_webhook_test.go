package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// verifySignature is what a receiver does, written from docs/pipelines.md's
// description (not with ragent's own Sign): HMAC-SHA256 keyed by the
// secret over "<timestamp>.<body>", hex, after "v1=".
func verifySignature(secret, timestamp, signature string, body []byte) bool {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp + "." + string(body)))
	want := "v1=" + hex.EncodeToString(m.Sum(nil))
	return hmac.Equal([]byte(want), []byte(signature))
}

// attempt is one POST the receiver saw.
type attempt struct {
	at       time.Time
	delivery string
	event    string
	body     []byte
	signedOK bool
}

// receiver is an in-test webhook endpoint: /flaky answers 500 to the first
// two attempts of each delivery, /down always 500.
type receiver struct {
	mu       sync.Mutex
	secrets  map[string]string // path → secret
	attempts map[string][]attempt
	changed  chan struct{}
}

func newReceiver(t *testing.T) (*receiver, string) {
	rc := &receiver{secrets: map[string]string{}, attempts: map[string][]attempt{}, changed: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		a := attempt{at: time.Now(), delivery: r.Header.Get("X-Ragent-Delivery"), event: r.Header.Get("X-Ragent-Event"), body: body,
			signedOK: verifySignature(rc.secrets[r.URL.Path], r.Header.Get("X-Ragent-Timestamp"), r.Header.Get("X-Ragent-Signature"), body)}
		rc.attempts[r.URL.Path] = append(rc.attempts[r.URL.Path], a)
		n := 0
		for _, b := range rc.attempts[r.URL.Path] {
			if b.delivery == a.delivery {
				n++
			}
		}
		rc.mu.Unlock()
		select {
		case rc.changed <- struct{}{}:
		default:
		}
		if r.URL.Path == "/down" || n <= 2 {
			http.Error(w, "not now", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return rc, "http://127.0.0.1:" + port
}

// wait blocks until cond holds over the attempts seen at path.
func (rc *receiver) wait(t *testing.T, path, what string, cond func([]attempt) bool) []attempt {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		rc.mu.Lock()
		got := append([]attempt(nil), rc.attempts[path]...)
		rc.mu.Unlock()
		if cond(got) {
			return got
		}
		select {
		case <-rc.changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: not reached; attempts at %s: %d", what, path, len(got))
		}
	}
}

func byEvent(as []attempt, docID, event string) []attempt {
	var out []attempt
	for _, a := range as {
		var p struct {
			Type     string
			Document struct{ ID, Status string }
		}
		if json.Unmarshal(a.body, &p) == nil && p.Document.ID == docID && p.Type == event && a.event == event {
			out = append(out, a)
		}
	}
	return out
}

// Webhooks: every POST is signed with the secret shown once at creation;
// a receiver answering 500 gets the event again after a growing wait; a
// receiver that never accepts has the event dead-lettered.
func TestPipelineWebhooks(t *testing.T) {
	rc, base := newReceiver(t)
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.WebhookBackoff = 200 * time.Millisecond
	cfg.WebhookMaxAttempts = 4
	_, c, kb := ingestEnv(t, cfg)

	create := func(path string) string {
		t.Helper()
		r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/webhooks", map[string]string{"url": base + path})
		if r.Status != http.StatusCreated || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("create webhook: %d %s", r.Status, r.Body)
		}
		var w struct{ ID, Secret string }
		r.json(t, &w)
		if !strings.HasPrefix(w.Secret, "whsec_") {
			t.Fatalf("secret %q", w.Secret)
		}
		rc.mu.Lock()
		rc.secrets[path] = w.Secret
		rc.mu.Unlock()
		return w.ID
	}
	create("/flaky")
	downID := create("/down")
	if r := c.do("GET", "/api/v1/knowledge-bases/"+kb+"/webhooks", nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), "whsec_") {
		t.Fatalf("the list shows a secret or fails: %d %s", r.Status, r.Body)
	}

	ready := c.uploadAccepted(kb, "hooked.txt", []byte("Narwhal tusks are teeth."))
	failed := c.uploadAccepted(kb, "hooked.pdf", []byte("%PDF-1.7\nbroken\n"))

	t.Run("ready: signed, retried after 500s with a growing wait, then accepted", func(t *testing.T) {
		got := rc.wait(t, "/flaky", "document.ready accepted", func(as []attempt) bool { return len(byEvent(as, ready.ID, "document.ready")) >= 3 })
		as := byEvent(got, ready.ID, "document.ready")
		for i, a := range as {
			if !a.signedOK {
				t.Fatalf("attempt %d: signature does not verify", i+1)
			}
			if a.delivery != as[0].delivery {
				t.Fatalf("attempt %d is delivery %s, want the same %s", i+1, a.delivery, as[0].delivery)
			}
		}
		// Backoff: 200ms before the second attempt, 400ms before the third.
		if d := as[1].at.Sub(as[0].at); d < 200*time.Millisecond {
			t.Fatalf("second attempt after %s, want at least 200ms", d)
		}
		if d := as[2].at.Sub(as[1].at); d < 400*time.Millisecond {
			t.Fatalf("third attempt after %s, want at least 400ms", d)
		}
		var p struct {
			Document struct {
				Status     string
				ChunkCount int
			}
		}
		json.Unmarshal(as[2].body, &p)
		if p.Document.Status != "ready" || p.Document.ChunkCount != 1 {
			t.Fatalf("payload %s", as[2].body)
		}
		// A tampered body does not verify.
		rc.mu.Lock()
		secret := rc.secrets["/flaky"]
		rc.mu.Unlock()
		ts := strconv.FormatInt(as[2].at.Unix(), 10)
		if verifySignature(secret, ts, "v1=00", as[2].body) {
			t.Fatal("a wrong signature verifies")
		}
	})
	t.Run("failed is delivered too", func(t *testing.T) {
		rc.wait(t, "/flaky", "document.failed accepted", func(as []attempt) bool { return len(byEvent(as, failed.ID, "document.failed")) >= 3 })
	})
	t.Run("a receiver that never accepts gets the event dead-lettered", func(t *testing.T) {
		rc.wait(t, "/down", "4 attempts", func(as []attempt) bool { return len(byEvent(as, ready.ID, "document.ready")) >= 4 })
		var l struct {
			Items []struct {
				ID                string
				FailedDeliveries  int `json:"failedDeliveries"`
				PendingDeliveries int `json:"pendingDeliveries"`
				LastError         string
			}
		}
		eventually(t, 30*time.Second, "dead-lettered", func() bool {
			c.do("GET", "/api/v1/knowledge-bases/"+kb+"/webhooks", nil).json(t, &l)
			for _, w := range l.Items {
				if w.ID == downID {
					return w.FailedDeliveries >= 2 && w.PendingDeliveries == 0 && strings.Contains(w.LastError, "500")
				}
			}
			return false
		}, func() any { return l.Items })
		// No fifth attempt after the dead letter.
		rc.mu.Lock()
		n := len(byEvent(rc.attempts["/down"], ready.ID, "document.ready"))
		rc.mu.Unlock()
		if n != 4 {
			t.Fatalf("%d attempts, want 4", n)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if r := c.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/webhooks/"+downID, nil); r.Status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		if r := c.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/webhooks/"+downID, nil); r.Status != http.StatusNotFound {
			t.Fatalf("second delete: %d %s", r.Status, r.Body)
		}
	})
}
