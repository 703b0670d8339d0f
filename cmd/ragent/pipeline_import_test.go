package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// origin is an in-test web server that URL imports fetch from.
type origin struct {
	srv      *httptest.Server
	port     string
	mu       sync.Mutex
	content  string // /versioned's body; its ETag follows it
	notMod   atomic.Int64
	plain    atomic.Int64 // /noetag fetches
	inFlight atomic.Int64
	maxIn    atomic.Int64
	slowDone chan struct{}
}

// newOrigin serves on addr (host:0).
func newOrigin(t *testing.T, addr string, redirectTo func() string) *origin {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	o := &origin{content: "Axolotl regeneration notes: the first edition.", slowDone: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/doc.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "Axolotl limbs regrow completely within weeks."+r.URL.Query().Get("v"))
	})
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><head><title>Capybara</title></head><body><h1>Capybara</h1><p>Capybaras are the largest living rodents.</p></body></html>")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("too much text ", 10_000))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-o.slowDone:
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, redirectTo()+r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/versioned", func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		body := o.content
		o.mu.Unlock()
		etag := fmt.Sprintf(`"%x"`, len(body)*7919+int(body[len(body)-2]))
		if r.Header.Get("If-None-Match") == etag {
			o.notMod.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		fmt.Fprint(w, body)
	})
	mux.HandleFunc("/noetag.txt", func(w http.ResponseWriter, r *http.Request) {
		o.plain.Add(1)
		fmt.Fprint(w, "Okapi stripes are unchanged on every fetch.")
	})
	mux.HandleFunc("/held.txt", func(w http.ResponseWriter, r *http.Request) {
		n := o.inFlight.Add(1)
		defer o.inFlight.Add(-1)
		for m := o.maxIn.Load(); n > m && !o.maxIn.CompareAndSwap(m, n); m = o.maxIn.Load() {
		}
		o.plain.Add(1)
		// Held open so that a second fetcher of the same document would
		// overlap with this one.
		time.Sleep(300 * time.Millisecond)
		fmt.Fprint(w, "Pangolin scales are made of keratin.")
	})
	o.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	o.srv.Start()
	_, o.port, _ = net.SplitHostPort(ln.Addr().String())
	t.Cleanup(func() { close(o.slowDone); o.srv.Close() })
	return o
}

func (o *origin) setContent(s string) {
	o.mu.Lock()
	o.content = s
	o.mu.Unlock()
}

// importURL imports a URL and returns the pending document.
func (c *client) importURL(kb string, body map[string]string) pipelineDoc {
	c.t.Helper()
	r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/documents:import", body)
	if r.Status != http.StatusAccepted {
		c.t.Fatalf("import %v: %d %s", body, r.Status, r.Body)
	}
	var d pipelineDoc
	r.json(c.t, &d)
	return d
}

func failedWith(c *client, id, want string) {
	c.t.Helper()
	d := c.waitDone(id, 30*time.Second)
	if d.Status != "failed" || !strings.Contains(d.Error, want) {
		c.t.Fatalf("document %s: status %s error %q, want failed with %q", id, d.Status, d.Error, want)
	}
}

// refused waits for a document to fail as not allowed where it leads,
// with no address in the error.
func refused(c *client, id string) {
	c.t.Helper()
	d := c.waitDone(id, 30*time.Second)
	if d.Status != "failed" || !strings.HasPrefix(d.Error, "address_not_allowed: ") || ipAddress.MatchString(d.Error) {
		c.t.Fatalf("document %s: status %s error %q, want failed with address_not_allowed and no address", id, d.Status, d.Error)
	}
}

// By default a URL import reaches only the public internet: loopback,
// private, link-local (metadata), CGNAT and the like are refused, literal
// addresses at the request, names where their resolved address is dialed,
// and redirects again at every hop.
func TestPipelineImportRefusesLocalAddresses(t *testing.T) {
	local := newOrigin(t, "127.0.0.1:0", nil)
	// The first hop is allowed (127.0.0.2), the redirect goes to 127.0.0.1,
	// which is not.
	hop := newOrigin(t, "127.0.0.2:0", func() string { return "http://127.0.0.1:" + local.port })
	hopByName := newOrigin(t, "127.0.0.2:0", func() string { return "http://localhost:" + local.port })
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	_, c, kb := ingestEnv(t, cfg)

	t.Run("a name that resolves to loopback is refused when dialed", func(t *testing.T) {
		// The error says why with a code, not where the name resolved to.
		d := c.importURL(kb, map[string]string{"url": "http://localhost:" + local.port + "/doc.txt"})
		refused(c.forTest(t), d.ID)
	})
	t.Run("a redirect to loopback is refused", func(t *testing.T) {
		d := c.importURL(kb, map[string]string{"url": "http://127.0.0.2:" + hop.port + "/redirect?to=/doc.txt"})
		refused(c.forTest(t), d.ID)
		d = c.importURL(kb, map[string]string{"url": "http://127.0.0.2:" + hopByName.port + "/redirect?to=/doc.txt"})
		refused(c.forTest(t), d.ID)
	})
	t.Run("webhook URLs follow the same rules", func(t *testing.T) {
		r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/webhooks", map[string]string{"url": "http://127.0.0.1:" + local.port + "/hook"})
		if r.Status != http.StatusBadRequest {
			t.Fatalf("literal loopback webhook: %d %s", r.Status, r.Body)
		}
		// A name is checked where it is dialed: the delivery fails.
		r = c.do("POST", "/api/v1/knowledge-bases/"+kb+"/webhooks", map[string]string{"url": "http://localhost:" + local.port + "/hook"})
		if r.Status != http.StatusCreated {
			t.Fatalf("webhook by name: %d %s", r.Status, r.Body)
		}
		c.forTest(t).uploadAccepted(kb, "hooked.txt", []byte("Some text for the hook."))
		var l struct{ Items []struct{ LastError string } }
		eventually(t, 30*time.Second, "delivery to loopback refused", func() bool {
			c.forTest(t).do("GET", "/api/v1/knowledge-bases/"+kb+"/webhooks", nil).json(t, &l)
			return len(l.Items) == 1 && strings.HasPrefix(l.Items[0].LastError, "address_not_allowed: ") &&
				!ipAddress.MatchString(l.Items[0].LastError)
		}, func() any { return l.Items })
	})
	t.Run("the allowed network is fetched", func(t *testing.T) {
		d := c.importURL(kb, map[string]string{"url": "http://127.0.0.2:" + hop.port + "/doc.txt"})
		c.forTest(t).waitReady(d.ID)
	})
	t.Run("literal and disguised local addresses are refused at once", func(t *testing.T) {
		for _, u := range []string{
			"http://127.0.0.1:" + local.port + "/doc.txt", "http://[::1]/", "http://[::ffff:127.0.0.1]/",
			"http://[::ffff:7f00:1]/", "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/",
			"http://10.1.2.3/", "http://172.16.0.1/", "http://192.168.1.1/", "http://100.64.0.1/", "http://[fe80::1]/",
			"http://0.0.0.0/", "http://[::]/", "http://224.0.0.1/", "http://[ff02::1]/", "http://[64:ff9b::7f00:1]/",
			"http://2130706433/", "http://0x7f000001/", "http://0x7f.0.0.1/", "http://0177.0.0.1/", "http://127.1/",
			"ftp://example.com/x", "file:///etc/passwd", "gopher://example.com/", "http://user:pw@example.com/", "/relative",
		} {
			r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/documents:import", map[string]string{"url": u})
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s: %d %s", u, r.Status, r.Body)
			}
		}
	})
}

// With the allow-list, URL imports fetch from a local server: content-type
// sniffing as for uploads, the size cap, the timeout, and refreshes that
// skip unchanged content (304 or the same bytes).
func TestPipelineImportFetches(t *testing.T) {
	o := newOrigin(t, "127.0.0.1:0", nil)
	base := "http://127.0.0.1:" + o.port
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.FetchTimeout = 2 * time.Second
	cfg.FetchMinRefresh = time.Second
	cfg.UploadMaxBytes = 64 << 10
	_, c, kb := ingestEnv(t, cfg)

	t.Run("fetched, sniffed and searchable", func(t *testing.T) {
		c := c.forTest(t)
		d := c.importURL(kb, map[string]string{"url": base + "/doc.txt", "externalId": "axolotl"})
		if d.Status != "pending" || d.ExternalID != "axolotl" || d.Source == nil || d.Source.URL != base+"/doc.txt" {
			t.Fatalf("import answer: %+v %+v", d, d.Source)
		}
		c.waitReady(d.ID)
		if !hasDocument(c.search(kb, "axolotl limbs regrow", "keyword"), d.ID) {
			t.Fatal("the imported document is not searchable")
		}
		page := c.importURL(kb, map[string]string{"url": base + "/page"})
		c.waitReady(page.ID)
		if got := c.pipelineDocument(page.ID); got.Mime != "text/html" || got.Name != "page.html" {
			t.Fatalf("page: mime %q name %q", got.Mime, got.Name)
		}
		if !hasDocument(c.search(kb, "largest living rodents", "keyword"), page.ID) {
			t.Fatal("the imported page is not searchable")
		}
	})
	t.Run("over the size cap fails", func(t *testing.T) {
		d := c.importURL(kb, map[string]string{"url": base + "/big"})
		failedWith(c.forTest(t), d.ID, "exceeds the upload limit")
	})
	t.Run("a server that does not answer in time fails", func(t *testing.T) {
		d := c.importURL(kb, map[string]string{"url": base + "/slow"})
		failedWith(c.forTest(t), d.ID, "no complete answer within 2s")
	})
	// refetched imports path with a refresh every second, waits until the
	// origin has answered fetches n times and checks that the document is
	// still its first, ready generation; it answers the document.
	refetched := func(t *testing.T, c *client, path string, fetches *atomic.Int64, n int64, what string) pipelineDoc {
		d := c.importURL(kb, map[string]string{"url": base + path, "refreshInterval": "1s"})
		c.waitReady(d.ID)
		eventually(t, 30*time.Second, what, func() bool { return fetches.Load() >= n }, func() any { return fetches.Load() })
		got := c.pipelineDocument(d.ID)
		if got.Generation != 1 || got.Status != "ready" {
			t.Fatalf("after %s: %+v %+v", what, got, got.Source)
		}
		return got
	}
	t.Run("refresh skips a 304 and fetches a change", func(t *testing.T) {
		c := c.forTest(t)
		d := refetched(t, c, "/versioned", &o.notMod, 2, "two refetches answered 304")
		if d.Source.ETag == "" {
			t.Fatalf("no ETag kept: %+v", d.Source)
		}
		o.setContent("Axolotl regeneration notes: the second edition mentions salamanders.")
		c.waitFor(d.ID, 30*time.Second, "generation 2 ready", func(d pipelineDoc) bool { return d.Generation == 2 && d.Status == "ready" })
		if !hasDocument(c.search(kb, "second edition salamanders", "keyword"), d.ID) {
			t.Fatal("the refreshed version is not searchable")
		}
	})
	t.Run("refresh skips the same bytes", func(t *testing.T) {
		if d := refetched(t, c.forTest(t), "/noetag.txt", &o.plain, 3, "three fetches"); d.Source.FetchedAt == "" {
			t.Fatalf("no fetch time kept: %+v", d.Source)
		}
	})
	t.Run("an import onto an uploaded external id replaces it", func(t *testing.T) {
		c := c.forTest(t)
		r := c.uploadExternal(kb, "okapi", "okapi.txt", []byte("Okapi notes, uploaded by hand."))
		var up pipelineDoc
		r.json(t, &up)
		c.waitReady(up.ID)
		d := c.importURL(kb, map[string]string{"url": base + "/doc.txt?v=okapi", "externalId": "okapi"})
		if d.ID != up.ID {
			t.Fatalf("import made %s, want the uploaded %s", d.ID, up.ID)
		}
		c.waitFor(d.ID, 30*time.Second, "generation 2 ready", func(d pipelineDoc) bool { return d.Generation == 2 && d.Status == "ready" })
	})
	t.Run("content another document has fails visibly", func(t *testing.T) {
		d := c.importURL(kb, map[string]string{"url": base + "/doc.txt"})
		failedWith(c.forTest(t), d.ID, "already in the knowledge base")
	})
	t.Run("bad requests are 400", func(t *testing.T) {
		for _, body := range []map[string]string{
			{"url": base + "/doc.txt", "refreshInterval": "500ms"},
			{"url": base + "/doc.txt", "refreshInterval": "soon"},
			{"url": base + "/doc.txt", "externalId": " x"},
			{"url": ""},
		} {
			if r := c.do("POST", "/api/v1/knowledge-bases/"+kb+"/documents:import", body); r.Status != http.StatusBadRequest {
				t.Errorf("%v: %d %s", body, r.Status, r.Body)
			}
		}
	})
}

// Two instances refresh the same import: the lease gives it to one
// fetcher at a time.
func TestPipelineRefreshOneFetcherAcrossInstances(t *testing.T) {
	o := newOrigin(t, "127.0.0.1:0", nil)
	cfg := testConfig(t)
	cfg.FetchAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.FetchMinRefresh = time.Second
	_, c, kb := ingestEnv(t, cfg)
	start(t, cfg)
	d := c.importURL(kb, map[string]string{"url": "http://127.0.0.1:" + o.port + "/held.txt", "refreshInterval": "1s"})
	c.waitReady(d.ID)
	eventually(t, 60*time.Second, "five fetches", func() bool { return o.plain.Load() >= 5 },
		func() any { return o.plain.Load() })
	if m := o.maxIn.Load(); m != 1 {
		t.Fatalf("%d fetches of one document ran at once, want 1", m)
	}
}
