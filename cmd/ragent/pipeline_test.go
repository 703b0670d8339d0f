package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// searchOnce is a keyword search that reports errors instead of failing the
// test, for loops running beside it.
func searchOnce(base, token, kb, query string) ([]searchHit, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "knowledgeBaseIds": []string{kb}, "mode": "keyword", "topK": 10})
	req, _ := http.NewRequest("POST", base+"/api/v1/search", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("search: %s", resp.Status)
	}
	var out struct{ Results []searchHit }
	return out.Results, json.NewDecoder(resp.Body).Decode(&out)
}

// uploadOnce is uploadExternal for goroutines: it returns the document id.
func uploadOnce(base, token, kb, externalID, name string, content []byte) (string, error) {
	resp, err := http.DefaultClient.Do(uploadRequest(base, token, kb, name, content, "externalId", externalID))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var d struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("upload: %s %v", resp.Status, err)
	}
	return d.ID, nil
}

// Replacing a document by external id never leaves a moment where search
// finds neither version or both: a search loop runs through the whole
// replace and every answer holds exactly one version's chunk. A new version
// that fails leaves the old one served, with the failure on the document.
// On both search backends: OpenSearch indexes the new version before the
// commit that takes the old one out of Postgres.
func TestPipelineReplaceByExternalID(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { testReplaceByExternalID(t, testConfig(t)) })
	t.Run("opensearch", func(t *testing.T) { testReplaceByExternalID(t, openSearchConfig(t, "")) })
}

func testReplaceByExternalID(t *testing.T, cfg Config) {
	in, c, kb := ingestEnv(t, cfg)
	version := func(n string) []byte {
		// The filler makes some 60 more chunks, so ingesting a version
		// takes long enough for the loops to search during it.
		return []byte("Quokka handbook version " + n + ": the zorbulon threshold is set by the " + n + " committee.\n\n" +
			strings.Repeat("Marsupials carry their young in a pouch for months after birth.\n\n", 600))
	}
	first := c.uploadExternal(kb, "handbook", "handbook.txt", version("ONE"))
	if first.Status != http.StatusAccepted {
		t.Fatalf("first upload: %d %s", first.Status, first.Body)
	}
	var d pipelineDoc
	first.json(t, &d)
	if d.ExternalID != "handbook" {
		t.Fatalf("externalId %q", d.ExternalID)
	}
	c.waitReady(d.ID)

	// Three search loops: every answer must hold chunks of d of one
	// version only, and at least one.
	var (
		stop       = make(chan struct{})
		loops      sync.WaitGroup
		searches   atomic.Int64
		sawTwo     atomic.Bool
		mu         sync.Mutex
		violations []string
	)
	for range 3 {
		loops.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				hits, err := searchOnce(in.url, c.token, kb, "zorbulon threshold")
				n := searches.Add(1)
				var one, two, mine int
				for _, h := range hits {
					if h.DocumentID == d.ID {
						mine++
						if strings.Contains(h.Content, "version ONE") {
							one++
						}
						if strings.Contains(h.Content, "version TWO") {
							two++
						}
					}
				}
				if two > 0 {
					sawTwo.Store(true)
				}
				if err != nil || mine == 0 || (one > 0) == (two > 0) {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("search %d: %d hits of d, %d of version one, %d of two, err %v", n, mine, one, two, err))
					mu.Unlock()
				}
			}
		})
	}
	r := c.uploadExternal(kb, "handbook", "handbook-v2.txt", version("TWO"))
	if r.Status != http.StatusAccepted {
		t.Fatalf("second upload: %d %s", r.Status, r.Body)
	}
	var d2 pipelineDoc
	r.json(t, &d2)
	if d2.ID != d.ID || d2.Generation != 2 {
		t.Fatalf("replace made %s generation %d, want %s generation 2", d2.ID, d2.Generation, d.ID)
	}
	c.waitReady(d.ID)
	for deadline := time.Now().Add(30 * time.Second); !sawTwo.Load() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	loops.Wait()
	if len(violations) > 0 {
		t.Fatalf("%d of %d searches did not find exactly one version: %v", len(violations), searches.Load(), violations[:min(5, len(violations))])
	}
	if !sawTwo.Load() {
		t.Fatal("the search loop never saw the new version")
	}
	t.Logf("%d searches during the replace, each found exactly one version", searches.Load())

	t.Run("the same content again changes nothing", func(t *testing.T) {
		r := c.uploadExternal(kb, "handbook", "handbook-v2.txt", version("TWO"))
		var got pipelineDoc
		r.json(t, &got)
		if r.Status != http.StatusOK || got.Generation != 2 || got.Status != "ready" {
			t.Fatalf("re-upload: %d %s", r.Status, r.Body)
		}
	})

	served := c.document(d.ID)
	t.Run("a version that fails to parse leaves the old one served", func(t *testing.T) {
		r := c.uploadExternal(kb, "handbook", "handbook-v3.pdf", []byte("%PDF-1.7\nthis is not a PDF at all\n"))
		if r.Status != http.StatusAccepted {
			t.Fatalf("broken upload: %d %s", r.Status, r.Body)
		}
		got := c.waitDone(d.ID, 30*time.Second)
		if got.Status != "failed" || got.Error == "" || got.Generation != 3 {
			t.Fatalf("broken version: %+v", got)
		}
		hits := c.search(kb, "zorbulon threshold", "keyword")
		if !hasDocument(hits, d.ID) || !strings.Contains(hits[0].Content, "TWO") {
			t.Fatalf("the served version is gone after a failed replace: %+v", hits)
		}
		if got.ChunkCount != served.ChunkCount {
			t.Fatalf("chunkCount %d, want the served version's %d", got.ChunkCount, served.ChunkCount)
		}
		// The good content again is a new version (the current one failed).
		r = c.uploadExternal(kb, "handbook", "handbook-v2.txt", version("TWO"))
		if r.Status != http.StatusAccepted {
			t.Fatalf("retry: %d %s", r.Status, r.Body)
		}
		c.waitReady(d.ID)
	})

	t.Run("lookup and delete by external id", func(t *testing.T) {
		got := c.byExternalID(kb, "handbook")
		if got == nil || got.ID != d.ID {
			t.Fatalf("lookup: %+v", got)
		}
		if c.byExternalID(kb, "no-such-id") != nil {
			t.Fatal("lookup of an unknown external id found a document")
		}
		if r := c.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/documents?externalId=handbook", nil); r.Status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		if hasDocument(c.search(kb, "zorbulon threshold", "keyword"), d.ID) {
			t.Fatal("search still finds the deleted document")
		}
		if c.byExternalID(kb, "handbook") != nil {
			t.Fatal("lookup still finds the deleted document")
		}
		if r := c.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/documents?externalId=handbook", nil); r.Status != http.StatusNotFound {
			t.Fatalf("second delete: %d %s", r.Status, r.Body)
		}
		if r := c.do("DELETE", "/api/v1/knowledge-bases/"+kb+"/documents", nil); r.Status != http.StatusBadRequest {
			t.Fatalf("delete without externalId: %d %s", r.Status, r.Body)
		}
		// The id is free again: a new upload is a new document.
		r := c.uploadExternal(kb, "handbook", "handbook.txt", version("THREE"))
		var again pipelineDoc
		r.json(t, &again)
		if r.Status != http.StatusAccepted || again.ID == d.ID {
			t.Fatalf("upload after delete: %d %s", r.Status, r.Body)
		}
	})

	t.Run("concurrent first uploads make one document", func(t *testing.T) {
		ids := make([]string, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() {
				ids[i], errs[i] = uploadOnce(in.url, c.token, kb, "raced", "raced.txt", []byte(fmt.Sprintf("raced content %d", i)))
			})
		}
		wg.Wait()
		for i := range ids {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Fatalf("upload %d: %s %v (first %s)", i, ids[i], errs[i], ids[0])
			}
		}
	})

	t.Run("a bad external id is 400", func(t *testing.T) {
		for _, ext := range []string{" padded", "line\nbreak", strings.Repeat("x", 513)} {
			if r := c.uploadExternal(kb, ext, "x.txt", []byte("x")); r.Status != http.StatusBadRequest {
				t.Fatalf("%q: %d %s", ext, r.Status, r.Body)
			}
		}
	})
}

// The document list filters by status and update time and pages with the
// usual cursor: a pipeline polls "what became ready or failed since T".
func TestPipelineStatusListing(t *testing.T) {
	_, c, kb := ingestEnv(t, testConfig(t))
	var ids []string
	for i := range 5 {
		d := c.uploadAccepted(kb, fmt.Sprintf("status-%d.txt", i), []byte(fmt.Sprintf("status document number %d about ferns", i)))
		ids = append(ids, d.ID)
	}
	failed := c.uploadAccepted(kb, "broken.pdf", []byte("%PDF-1.7\nnot a pdf\n"))
	for _, id := range ids {
		c.waitReady(id)
	}
	c.waitDone(failed.ID, 30*time.Second)

	page := func(query string) (items []pipelineDoc, next string) {
		t.Helper()
		r := c.do("GET", "/api/v1/knowledge-bases/"+kb+"/documents?"+query, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", query, r.Status, r.Body)
		}
		var l struct {
			Items      []pipelineDoc
			NextCursor *string
		}
		r.json(t, &l)
		if l.NextCursor != nil {
			next = *l.NextCursor
		}
		return l.Items, next
	}
	var seen []string
	for cursor := "start"; cursor != ""; {
		q := "status=ready&limit=2"
		if cursor != "start" {
			q += "&cursor=" + cursor
		}
		var items []pipelineDoc
		items, cursor = page(q)
		for _, d := range items {
			if d.Status != "ready" {
				t.Fatalf("status=ready listed %s %s", d.ID, d.Status)
			}
			seen = append(seen, d.ID)
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("paged through %d ready documents, want %d: %v", len(seen), len(ids), seen)
	}
	if items, _ := page("status=failed"); len(items) != 1 || items[0].ID != failed.ID || items[0].Error == "" {
		t.Fatalf("status=failed: %+v", items)
	}
	// Everything changed since before the first upload; nothing after the
	// last change.
	last := time.Time{}
	all, _ := page("limit=200")
	for _, d := range all {
		u, err := time.Parse(time.RFC3339Nano, d.UpdatedAt)
		if err != nil {
			t.Fatal(err)
		}
		if u.After(last) {
			last = u
		}
	}
	if items, _ := page("updatedSince=" + url.QueryEscape(last.Add(time.Microsecond).Format(time.RFC3339Nano))); len(items) != 0 {
		t.Fatalf("updatedSince after the last change listed %d documents", len(items))
	}
	if items, _ := page("updatedSince=" + url.QueryEscape(last.Format(time.RFC3339Nano))); len(items) == 0 {
		t.Fatal("updatedSince at the last change listed nothing")
	}
	for _, bad := range []string{"status=done", "updatedSince=yesterday", "cursor=abc"} {
		if r := c.do("GET", "/api/v1/knowledge-bases/"+kb+"/documents?"+bad, nil); r.Status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", bad, r.Status, r.Body)
		}
	}
}
