package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/ragent-go/ragent/internal/testenv"
)

// instance is one in-process ragent with its own clients, serving on a real
// loopback port, as a separate process would.
type instance struct {
	app  *App
	url  string
	stop func()
}

// testConfig returns a configuration on the test services: a fresh database
// and a unique Redis prefix, shared by every instance started from it.
func testConfig(t testing.TB) Config {
	t.Helper()
	rdb := testenv.RedisOptions(t) // RAGENT_TEST_REDIS_TOPOLOGY's
	env := map[string]string{
		"RAGENT_DATABASE_URL":          testenv.FreshDatabase(t),
		"RAGENT_REDIS_URL":             rdb.URL,
		"RAGENT_REDIS_SENTINEL_ADDRS":  strings.Join(rdb.SentinelAddrs, ","),
		"RAGENT_REDIS_SENTINEL_MASTER": rdb.SentinelMaster,
		"RAGENT_REDIS_CLUSTER_ADDRS":   strings.Join(rdb.ClusterAddrs, ","),
		"RAGENT_REDIS_PREFIX":          testenv.Prefix(t),
		"RAGENT_ADMIN_PASSWORD":        "admin-password",
		"RAGENT_DEMO":                  "false",
		"RAGENT_HTTP_ADDR":             "127.0.0.1:0",
		"RAGENT_LOG_LEVEL":             "warn",
		// Tests send many chats and requests as one user; the rate limits
		// have their own tests.
		"RAGENT_CHAT_RATE_PER_MINUTE":    "0",
		"RAGENT_SESSION_RATE_PER_MINUTE": "0",
	}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// Many instances per process: each its own metrics port. The tests read
	// /metrics through the API port; TestMetricsPort checks the default
	// (not there).
	cfg.MetricsAddr, cfg.MetricsPublic = "127.0.0.1:0", true
	// A leased worker id is held three renewal periods before its first
	// id (idgen); at the default 1 s every test instance would wait 3 s.
	cfg.WorkerLeaseRenew = 50 * time.Millisecond
	// Every test instance creates an admin and most log in several users:
	// at bcrypt's default cost, under the race detector, each hash is
	// about a CPU-second. The cost is auth's (service/auth tests it); here
	// only that the hash is checked matters.
	cfg.bcryptCost = bcrypt.MinCost
	// make test runs three processes of these tests at once beside the
	// other packages' on one Postgres: small pools keep them all under its
	// max_connections.
	cfg.DatabaseMaxConns = 8
	return cfg
}

// testLogger logs at debug level to stderr under go test -v, unless
// RAGENT_TEST_QUIET=1 (make test's shards run with -test.v for their events
// and would otherwise log every instance of every test).
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("RAGENT_TEST_QUIET") != "1" {
		return newLogger(os.Stderr, "debug")
	}
	return newLogger(io.Discard, "error")
}

// start runs an instance until the test ends.
func start(t testing.TB, cfg Config) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, cfg, ln)
}

// startOn runs an instance on ln until the test ends: for a configuration
// that needs the instance's address (the single sign-on redirect URL).
func startOn(t testing.TB, cfg Config, ln net.Listener) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	app, err := newApp(ctx, cfg, testLogger(t))
	if err != nil {
		cancel()
		ln.Close()
		t.Fatalf("start instance: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, ln) }()
	in := &instance{app: app, url: "http://" + ln.Addr().String()}
	stopped := false
	in.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("instance did not stop within 30s")
		}
		app.Close(context.Background())
	}
	t.Cleanup(in.stop)
	return in
}

// authorize sets the client's bearer token, if it has one, and the extra
// header name/value pairs on req.
func (c *client) authorize(req *http.Request, headers []string) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	setHeaders(req, headers)
}

// setHeaders sets header name/value pairs on req.
func setHeaders(req *http.Request, pairs []string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		req.Header.Set(pairs[i], pairs[i+1])
	}
}

// client calls one instance with an optional bearer token.
type client struct {
	t     testing.TB
	base  string
	token string
	// refresh, on the OpenSearch backend, makes what the index holds
	// searchable at once: a ready document's chunks are indexed, and
	// searchable only after the index's next refresh (up to 1 s later).
	refresh func()
}

func (in *instance) client(t testing.TB, token string) *client {
	c := &client{t: t, base: in.url, token: token}
	// An instance run as a child process (in.app nil) is refreshed by
	// nobody: its benchmarks do not search.
	if in.app == nil {
		return c
	}
	if cfg := in.app.cfg; cfg.SearchBackend == "opensearch" {
		c.refresh = func() {
			// An error (OpenSearch cut away by a test) shows in the search
			// that follows.
			url := strings.TrimRight(cfg.OpenSearchURL, "/") + "/" + cfg.OpenSearchIndex + "/_refresh"
			if resp, err := http.Post(url, "application/json", nil); err == nil {
				resp.Body.Close()
			}
		}
	}
	return c
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB, dst any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, dst); err != nil {
		t.Fatalf("decode %q: %v", r.Body, err)
	}
}

func (r response) errorCode(t testing.TB) string {
	t.Helper()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	r.json(t, &e)
	return e.Error.Code
}

func (c *client) do(method, path string, body any, headers ...string) response {
	c.t.Helper()
	req := testenv.NewRequest(c.t, method, c.base+path, body)
	c.authorize(req, headers)
	return roundTrip(c.t, req)
}

// roundTrip sends req and reads the whole answer; a transport error fails t.
func roundTrip(t testing.TB, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.RequestURI(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// connectDB opens a connection of its own to the test database, closed when
// t ends, for what the API does not show.
func connectDB(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// countRows runs query, a SELECT count(*) with args, on db.
func countRows(t testing.TB, db *pgx.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// login returns a token for the user.
func (in *instance) login(t testing.TB, username, password string) string {
	t.Helper()
	r := in.client(t, "").do("POST", "/api/v1/auth/login", map[string]string{"username": username, "password": password})
	if r.Status != http.StatusOK {
		t.Fatalf("login %s: %d %s", username, r.Status, r.Body)
	}
	var s struct{ Token string }
	r.json(t, &s)
	return s.Token
}

// adminClient logs in as the bootstrap admin and returns a client with that
// session.
func (in *instance) adminClient(t testing.TB) *client {
	t.Helper()
	return in.client(t, in.login(t, "admin", "admin-password"))
}

// createUser makes a plain user through the admin API and returns its id.
func (in *instance) createUser(t testing.TB, adminToken, username, password, role string) string {
	t.Helper()
	r := in.client(t, adminToken).do("POST", "/api/v1/users", map[string]string{"username": username, "password": password, "role": role})
	if r.Status != http.StatusCreated {
		t.Fatalf("create user: %d %s", r.Status, r.Body)
	}
	var u struct{ ID string }
	r.json(t, &u)
	return u.ID
}

// getJSON reads path with GET into a T; any status but 200 fails c's test.
func getJSON[T any](c *client, path string) T {
	c.t.Helper()
	r := c.do("GET", path, nil)
	if r.Status != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	var out T
	r.json(c.t, &out)
	return out
}

// getItems reads the items of the list at path (one page).
func getItems[T any](c *client, path string) []T {
	c.t.Helper()
	return getJSON[struct{ Items []T }](c, path).Items
}

// forTest returns a copy of c that reports to t, for use inside a subtest.
func (c *client) forTest(t testing.TB) *client {
	return &client{t: t, base: c.base, token: c.token}
}

// createKB creates a knowledge base and returns its id.
func (c *client) createKB(name string) string {
	c.t.Helper()
	r := c.do("POST", "/api/v1/knowledge-bases", map[string]any{"name": name})
	if r.Status != http.StatusCreated {
		c.t.Fatalf("create knowledge base: %d %s", r.Status, r.Body)
	}
	var kb struct{ ID string }
	r.json(c.t, &kb)
	return kb.ID
}

// makeInternal opens a knowledge base to every logged-in user.
func (c *client) makeInternal(kb string) {
	c.t.Helper()
	if r := c.do("PATCH", "/api/v1/knowledge-bases/"+kb, map[string]any{"visibility": "internal"}); r.Status != http.StatusOK {
		c.t.Fatalf("make internal: %d %s", r.Status, r.Body)
	}
}

// docJSON is a document as the API returns it.
type docJSON struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Error      string `json:"error"`
	ChunkCount int    `json:"chunkCount"`
	Generation int    `json:"generation"`
	// CuratedChunks: chunks changed by hand (curation_test.go).
	CuratedChunks int    `json:"curatedChunks"`
	Kind          string `json:"kind"`
}

// upload posts one file as multipart `file` and returns the response,
// whatever its status.
func (c *client) upload(kbID, name string, content []byte) response {
	c.t.Helper()
	return c.uploadFields(kbID, name, content)
}

// uploadFields is upload with form fields (name, value pairs) before the
// file part.
func (c *client) uploadFields(kbID, name string, content []byte, fields ...string) response {
	c.t.Helper()
	contentType, body := uploadForm(name, content, fields...)
	return c.do("POST", "/api/v1/knowledge-bases/"+kbID+"/documents", body, "Content-Type", contentType)
}

// uploadForm is the multipart body of an upload: the form fields (name,
// value pairs), then the file part. (Writing to memory cannot fail.)
func uploadForm(name string, content []byte, fields ...string) (contentType string, body []byte) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = mw.WriteField(fields[i], fields[i+1])
	}
	w, _ := mw.CreateFormFile("file", name)
	_, _ = w.Write(content)
	_ = mw.Close()
	return mw.FormDataContentType(), buf.Bytes()
}

// uploadRequest is a POST of an upload form to knowledge base kb, for the
// goroutines of load tests (they report what happened rather than fail).
func uploadRequest(base, token, kb, name string, content []byte, fields ...string) *http.Request {
	contentType, body := uploadForm(name, content, fields...)
	req, _ := http.NewRequest("POST", base+"/api/v1/knowledge-bases/"+kb+"/documents", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// uploadAccepted uploads and expects 202 with a document.
func (c *client) uploadAccepted(kbID, name string, content []byte) docJSON {
	c.t.Helper()
	r := c.upload(kbID, name, content)
	if r.Status != http.StatusAccepted {
		c.t.Fatalf("upload %s: %d %s", name, r.Status, r.Body)
	}
	var d docJSON
	r.json(c.t, &d)
	return d
}

// document fetches one document.
func (c *client) document(id string) docJSON {
	c.t.Helper()
	return c.pipelineDocument(id).docJSON
}

// waitDone polls a document until it is ready or failed.
func (c *client) waitDone(id string, timeout time.Duration) docJSON {
	c.t.Helper()
	var d docJSON
	testenv.Eventually(c.t, timeout, "document "+id+" ready or failed", func() bool {
		d = c.document(id)
		return d.Status == "ready" || d.Status == "failed"
	})
	if c.refresh != nil {
		c.refresh()
	}
	return d
}

// waitReady waits up to 30s until a document is ready, failing the test if
// its ingestion fails.
func (c *client) waitReady(id string) {
	c.t.Helper()
	if d := c.waitDone(id, 30*time.Second); d.Status != "ready" {
		c.t.Fatalf("document %s failed: %s", id, d.Error)
	}
}
