package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// gate is an in-test HTTP server whose /held/ paths block until release
// is closed (or the request ends), counting the requests held, and whose
// other paths answer at once; every request is recorded by path.
type gate struct {
	base    string
	release chan struct{}
	held    atomic.Int64 // held now
	maxHeld atomic.Int64
	once    sync.Once
	mu      sync.Mutex
	seen    map[string][][]byte // path → bodies
}

// open lets every held request, and every later one, through.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func newGate(t *testing.T) *gate {
	t.Helper()
	g := &gate{release: make(chan struct{}), seen: map[string][][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.seen[r.URL.Path] = append(g.seen[r.URL.Path], body)
		g.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/held/") {
			n := g.held.Add(1)
			for m := g.maxHeld.Load(); n > m && !g.maxHeld.CompareAndSwap(m, n); m = g.maxHeld.Load() {
			}
			defer g.held.Add(-1)
			select {
			case <-g.release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "Quokka note %s: quokkas smile because of their facial muscles.", r.URL.Path)
	}))
	// Release before closing: Close waits for the held requests.
	t.Cleanup(func() { g.open(); srv.Close() })
	g.base = srv.URL
	return g
}

func (g *gate) count(path string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen[path])
}

func (g *gate) bodies(path string) [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.seen[path]...)
}

// webhookList is the webhook list as a client reads it.
type webhookList struct {
	Items []struct {
		ID            string `json:"id"`
		URL           string `json:"url"`
		CreatedBy     string `json:"createdBy"`
		CreatedByName string `json:"createdByName"`
		Pending       int    `json:"pendingDeliveries"`
		Failed        int    `json:"failedDeliveries"`
		Skipped       int    `json:"skippedDeliveries"`
		LastError     string `json:"lastError"`
	} `json:"items"`
}

func (c *client) webhooks(kb string) webhookList {
	c.t.Helper()
	var l webhookList
	r := c.do("GET", "/api/v1/knowledge-bases/"+kb+"/webhooks", nil)
	if r.Status != http.StatusOK {
		c.t.Fatalf("list webhooks: %d %s", r.Status, r.Body)
	}
	r.json(c.t, &l)
	return l
}

func (c *client) createWebhook(kb, url string) string {
	c.t.Helper()
	r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/webhooks", map[string]string{"url": url})
	if r.Status != http.StatusCreated {
		c.t.Fatalf("create webhook %s: %d %s", url, r.Status, r.Body)
	}
	var w struct{ ID string }
	r.json(c.t, &w)
	return w.ID
}

// mentions reports whether one of the webhook payloads is about docID.
func mentions(bodies [][]byte, docID string) bool {
	for _, b := range bodies {
		var p struct{ Document struct{ ID string } }
		if json.Unmarshal(b, &p) == nil && p.Document.ID == docID {
			return true
		}
	}
	return false
}

// A webhook acts for its creator: once a manager is removed from the
// knowledge base, the webhook they made receives none of its events; the
// skipped deliveries are recorded and shown, with the creator, in the list.
func TestPipelineWebhookCreatorRemoved(t *testing.T) {
	g := newGate(t)
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	in := start(t, cfg)
	adminToken := in.login(t, "admin", "admin-password")
	admin := in.client(t, adminToken)
	kb := admin.createKB("hooks-of-a-manager")
	mgrID := in.createUser(t, adminToken, "hookmgr", "hookmgr-password", "user")
	if r := admin.do("POST", "/api/v1/knowledge-bases/"+kb+"/members", map[string]string{"kind": "user", "name": "hookmgr", "role": "manager"}); r.Status != http.StatusCreated {
		t.Fatalf("add manager: %d %s", r.Status, r.Body)
	}
	mgr := in.client(t, in.login(t, "hookmgr", "hookmgr-password"))
	hookID := mgr.createWebhook(kb, g.base+"/hook")

	// While the manager may read the knowledge base, events are delivered.
	before := admin.uploadAccepted(kb, "before.txt", []byte("Wombats produce cube-shaped droppings."))
	eventually(t, 60*time.Second, "the event before the removal delivered", func() bool { return mentions(g.bodies("/hook"), before.ID) },
		func() any { return g.count("/hook") })

	var members struct{ Items []struct{ ID, Name string } }
	admin.do("GET", "/api/v1/knowledge-bases/"+kb+"/members", nil).json(t, &members)
	for _, m := range members.Items {
		if m.Name == "hookmgr" {
			if r := admin.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/members/"+m.ID, nil); r.Status != http.StatusNoContent {
				t.Fatalf("remove manager: %d %s", r.Status, r.Body)
			}
		}
	}
	after := admin.uploadAccepted(kb, "after.txt", []byte("Platypuses detect prey by electroreception."))
	admin.waitReady(after.ID)
	var l webhookList
	eventually(t, 60*time.Second, "the event after the removal settled", func() bool {
		l = admin.webhooks(kb)
		return mentions(g.bodies("/hook"), after.ID) || (len(l.Items) == 1 && l.Items[0].Pending == 0)
	}, func() any { return l.Items })
	if mentions(g.bodies("/hook"), after.ID) {
		t.Fatal("the removed manager's webhook received an event of the knowledge base")
	}
	w := l.Items[0]
	if w.ID != hookID || w.Skipped != 1 || !strings.HasPrefix(w.LastError, "creator_no_access: ") {
		t.Fatalf("the skipped delivery is not shown: %+v", w)
	}
	if w.CreatedBy != mgrID || w.CreatedByName != "hookmgr" {
		t.Fatalf("the list does not show the creator: %+v", w)
	}
}

// A receiver that does not answer holds only its own webhook: another
// webhook's receiver gets the same event while the first is still held.
func TestPipelineWebhookSlowReceiverAlone(t *testing.T) {
	g := newGate(t)
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.FetchTimeout = 5 * time.Minute // the held receiver does not time out during the test
	_, c, kb := ingestEnv(t, cfg)
	c.createWebhook(kb, g.base+"/held/slow") // made first: its delivery is the older one
	c.createWebhook(kb, g.base+"/fast")

	d := c.uploadAccepted(kb, "quick.txt", []byte("Sloths can hold their breath for forty minutes."))
	eventually(t, 60*time.Second, "the slow receiver holds its delivery", func() bool { return g.held.Load() == 1 },
		func() any { return g.count("/held/slow") })
	eventually(t, 60*time.Second, "the fast receiver gets the event while the slow one is held", func() bool {
		return mentions(g.bodies("/fast"), d.ID)
	}, func() any { return g.count("/fast") })
	if g.held.Load() != 1 || g.count("/held/slow") != 1 {
		t.Fatalf("the slow receiver is no longer held (%d held, %d requests)", g.held.Load(), g.count("/held/slow"))
	}
}

// One knowledge base's URLs that never finish take only its share of the
// fetchers: another knowledge base's import is fetched and ready while they
// are all still held.
func TestPipelineImportPerKnowledgeBaseShare(t *testing.T) {
	g := newGate(t)
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.FetchTimeout = 5 * time.Minute
	_, c, kbA := ingestEnv(t, cfg)
	kbB := c.createKB("kb-b-share")
	var heldDocs []string
	for i := range 10 {
		heldDocs = append(heldDocs, c.importURL(kbA, map[string]string{"url": fmt.Sprintf("%s/held/%d.txt", g.base, i)}).ID)
	}
	const perKB = 2 // RAGENT_FETCH_PER_KB's default
	eventually(t, 60*time.Second, "knowledge base A's share of fetches held", func() bool { return g.held.Load() == perKB },
		func() any { return g.held.Load() })

	d := c.importURL(kbB, map[string]string{"url": g.base + "/free.txt"})
	c.waitReady(d.ID)
	if h := g.held.Load(); h != perKB {
		t.Fatalf("%d of A's fetches held when B's import was ready, want %d (the share) still held", h, perKB)
	}
	if m := g.maxHeld.Load(); m > perKB {
		t.Fatalf("%d fetches of one knowledge base ran at once, want at most %d", m, perKB)
	}
	// Released, A's imports all finish.
	g.open()
	for _, id := range heldDocs {
		c.waitReady(id)
	}
}

// ipAddress matches an IPv4 address or a host:port, which fetch and
// delivery errors must not carry.
var ipAddress = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+|:\d{2,5}\b|lookup|dial tcp`)

// Failed fetches and deliveries say why with a stable code and message,
// never with the network error (the resolver's address, what an internal
// name resolves to).
func TestPipelineFetchErrorsNameNoAddress(t *testing.T) {
	closedPort := strconv.Itoa(testenv.FreePort(t)) // nothing listens there: connections are refused
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	_, c, kb := ingestEnv(t, cfg)

	for _, tc := range []struct{ url, code string }{
		{"http://127.0.0.1:" + closedPort + "/gone.txt", "fetch_failed: "},
		{"http://nothing-here.invalid/doc.txt", "fetch_failed: "},
	} {
		d := c.importURL(kb, map[string]string{"url": tc.url})
		got := c.waitDone(d.ID, 60*time.Second)
		if got.Status != "failed" || !strings.HasPrefix(got.Error, tc.code) || ipAddress.MatchString(got.Error) {
			t.Errorf("%s: status %s error %q, want failed with %q and no address", tc.url, got.Status, got.Error, tc.code)
		}
	}

	c.createWebhook(kb, "http://127.0.0.1:"+closedPort+"/hook")
	c.uploadAccepted(kb, "hooked.txt", []byte("Tardigrades survive the vacuum of space."))
	var l webhookList
	eventually(t, 60*time.Second, "a failed delivery recorded", func() bool {
		l = c.webhooks(kb)
		return len(l.Items) == 1 && l.Items[0].LastError != ""
	}, func() any { return l.Items })
	if e := l.Items[0].LastError; !strings.HasPrefix(e, "fetch_failed: ") || ipAddress.MatchString(e) {
		t.Fatalf("webhook lastError %q, want fetch_failed and no address", e)
	}
}
