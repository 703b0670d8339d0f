package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// curatedChunk is a chunk as the curation routes answer it.
type curatedChunk struct {
	ID         string `json:"id"`
	DocumentID string `json:"documentId"`
	Ordinal    int    `json:"ordinal"`
	Section    string `json:"section"`
	Content    string `json:"content"`
	Enabled    bool   `json:"enabled"`
	Manual     bool   `json:"manual"`
	Revision   int    `json:"revision"`
}

type revisionJSON struct {
	Revision      int     `json:"revision"`
	Action        string  `json:"action"`
	ContentBefore *string `json:"contentBefore"`
	ContentAfter  *string `json:"contentAfter"`
	EnabledBefore *bool   `json:"enabledBefore"`
	EnabledAfter  *bool   `json:"enabledAfter"`
	ActorName     string  `json:"actorName"`
	ChunkID       string  `json:"chunkId"`
	Ordinal       *int    `json:"ordinal"`
	Section       string  `json:"section"`
}

func (c *client) curatedChunks(docID string) []curatedChunk {
	c.t.Helper()
	return getItems[curatedChunk](c, "/api/v1/documents/"+docID+"/chunks")
}

func (c *client) patchChunk(id string, body map[string]any) curatedChunk {
	c.t.Helper()
	r := c.do("PATCH", "/api/v1/chunks/"+id, body)
	if r.Status != http.StatusOK {
		c.t.Fatalf("PATCH chunk %v: %d %s", body, r.Status, r.Body)
	}
	var out curatedChunk
	r.json(c.t, &out)
	return out
}

func (c *client) revisions(id string) []revisionJSON {
	c.t.Helper()
	return getItems[revisionJSON](c, "/api/v1/chunks/"+id+"/revisions")
}

// found reports whether a search in every mode finds the chunk with this
// content, per mode.
func (c *client) foundIn(kb, query, chunkID string, modes ...string) map[string]bool {
	c.t.Helper()
	out := map[string]bool{}
	for _, m := range modes {
		for _, h := range c.search(kb, query, m) {
			if h.ChunkID == chunkID {
				out[m] = true
			}
		}
	}
	return out
}

var curationBackends = []struct {
	name string
	cfg  func(t *testing.T) Config
}{
	{"postgres", func(t *testing.T) Config { return testConfig(t) }},
	{"opensearch", func(t *testing.T) Config { cfg := openSearchConfig(t, ""); cfg.OpenSearchVectors = true; return cfg }},
}

// TestChunkCuration edits, disables, enables, restores, adds and deletes
// chunks and checks, right after each answer and without waiting, what
// keyword, vector and hybrid search find on both backends, then what a
// reindex does with the edits.
func TestChunkCuration(t *testing.T) {
	for _, b := range curationBackends {
		t.Run(b.name, func(t *testing.T) {
			_, c, kb := ingestEnv(t, b.cfg(t))
			doc := c.uploadAccepted(kb, "policy.md", []byte("# Leave\n\nThe zebrafish policy grants fifteen days of paid leave per year.\n"))
			c.waitReady(doc.ID)
			chunks := c.curatedChunks(doc.ID)
			if len(chunks) != 1 || !chunks[0].Enabled || chunks[0].Revision != 0 {
				t.Fatalf("chunks as parsed: %+v", chunks)
			}
			id, original := chunks[0].ID, chunks[0].Content
			all := []string{"keyword", "vector", "hybrid"}

			edited := c.patchChunk(id, map[string]any{"content": "The okapi policy grants twenty days of paid leave per year."})
			if edited.Revision != 1 || !strings.Contains(edited.Content, "okapi") {
				t.Fatalf("edited: %+v", edited)
			}
			if got := c.foundIn(kb, "okapi policy twenty days", id, all...); len(got) != 3 {
				t.Errorf("the edit is not searchable at once: found in %v", got)
			}
			if got := c.foundIn(kb, "zebrafish", id, "keyword"); len(got) != 0 {
				t.Errorf("the old text is still found by keyword: %v", got)
			}
			for _, h := range c.search(kb, "okapi", "keyword") {
				if h.ChunkID == id && !strings.Contains(h.Content, "okapi") {
					t.Errorf("hit shows the old content: %q", h.Content)
				}
			}

			c.patchChunk(id, map[string]any{"enabled": false})
			if got := c.foundIn(kb, "okapi policy twenty days", id, all...); len(got) != 0 {
				t.Errorf("a disabled chunk is retrieved: %v", got)
			}
			c.patchChunk(id, map[string]any{"enabled": true})
			if got := c.foundIn(kb, "okapi policy twenty days", id, all...); len(got) != 3 {
				t.Errorf("an enabled chunk is not retrieved again: %v", got)
			}

			restored := c.do("POST", "/api/v1/chunks/"+id+"/revisions/0/restore", nil)
			if restored.Status != http.StatusOK || !strings.Contains(string(restored.Body), "zebrafish") {
				t.Fatalf("restore to the parsed text: %d %s", restored.Status, restored.Body)
			}
			if got := c.foundIn(kb, "zebrafish", id, "keyword"); len(got) != 1 {
				t.Errorf("the restored text is not found: %v", got)
			}
			revs := c.revisions(id)
			wantActions := []string{"restore", "enable", "disable", "edit"}
			var actions []string
			for i, r := range revs {
				actions = append(actions, r.Action)
				if r.Revision != len(revs)-i || r.ActorName != "admin" {
					t.Errorf("revision %d: %+v", i, r)
				}
			}
			if !slices.Equal(actions, wantActions) {
				t.Errorf("revisions %v, want %v", actions, wantActions)
			}
			if *revs[3].ContentBefore != original || *revs[0].ContentAfter != original {
				t.Errorf("history does not start and end with the parsed text: %+v", revs)
			}

			// A manual chunk on the document and one on the knowledge base.
			r := c.do("POST", "/api/v1/documents/"+doc.ID+"/chunks", map[string]any{"question": "Who approves capybara leave?", "answer": "The capybara desk approves it."})
			if r.Status != http.StatusCreated {
				t.Fatalf("add chunk: %d %s", r.Status, r.Body)
			}
			var added curatedChunk
			r.json(t, &added)
			if !added.Manual || added.Ordinal != 1 {
				t.Errorf("added: %+v", added)
			}
			if got := c.foundIn(kb, "capybara desk", added.ID, all...); len(got) != 3 {
				t.Errorf("an added chunk is not searchable at once: %v", got)
			}
			r = c.do("POST", "/api/v1/knowledge-bases/"+kb+"/chunks", map[string]any{"content": "The wombat office closes at noon on Fridays."})
			if r.Status != http.StatusCreated {
				t.Fatalf("add manual chunk: %d %s", r.Status, r.Body)
			}
			var manual curatedChunk
			r.json(t, &manual)
			if got := c.foundIn(kb, "wombat office", manual.ID, all...); len(got) != 3 {
				t.Errorf("a knowledge base's manual chunk is not searchable at once: %v", got)
			}
			md := c.document(manual.DocumentID)
			if md.Status != "ready" {
				t.Errorf("manual document %+v", md)
			}
			if r := c.do("POST", "/api/v1/documents/"+manual.DocumentID+"/reindex", nil); r.Status != http.StatusBadRequest {
				t.Errorf("reindex of the manual document: %d %s", r.Status, r.Body)
			}
			r = c.do("POST", "/api/v1/knowledge-bases/"+kb+"/chunks", map[string]any{"content": "Second manual chunk about the wombat canteen."})
			var manual2 curatedChunk
			r.json(t, &manual2)
			if manual2.DocumentID != manual.DocumentID || manual2.Ordinal != 1 {
				t.Errorf("a second manual chunk went to %s ordinal %d, want %s ordinal 1", manual2.DocumentID, manual2.Ordinal, manual.DocumentID)
			}

			if r := c.do("DELETE", "/api/v1/chunks/"+added.ID, nil); r.Status != http.StatusNoContent {
				t.Fatalf("delete chunk: %d %s", r.Status, r.Body)
			}
			if got := c.foundIn(kb, "capybara desk", added.ID, all...); len(got) != 0 {
				t.Errorf("a deleted chunk is retrieved: %v", got)
			}
			if revs := c.revisions(added.ID); len(revs) != 2 || revs[0].Action != "delete" {
				t.Errorf("a deleted chunk's history: %+v", revs)
			}

			// Every change is in the audit log.
			for _, action := range []string{"chunk.update", "chunk.restore", "chunk.create", "chunk.delete"} {
				r := c.do("GET", "/api/v1/admin/audit?action="+action+"&result=success", nil)
				if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"action":"`+action+`"`) {
					t.Errorf("audit %s: %d %s", action, r.Status, r.Body)
				}
			}

			// A reindex rebuilds the file's chunks: the curated ones go.
			c.patchChunk(id, map[string]any{"content": "The okapi policy grants twenty days of paid leave per year."})
			if d := c.document(doc.ID); d.CuratedChunks != 2 {
				t.Errorf("curated chunks before the reindex: %d, want 2 (the edit and the deleted chunk)", d.CuratedChunks)
			}
			if r := c.do("POST", "/api/v1/documents/"+doc.ID+"/reindex", nil); r.Status != http.StatusAccepted {
				t.Fatalf("reindex: %d %s", r.Status, r.Body)
			}
			c.waitReady(doc.ID)
			after := c.curatedChunks(doc.ID)
			if len(after) != 1 || after[0].Content != original || after[0].Revision != 0 {
				t.Errorf("chunks after the reindex: %+v", after)
			}
			if d := c.document(doc.ID); d.CuratedChunks != 0 {
				t.Errorf("curated chunks after the reindex: %d", d.CuratedChunks)
			}
			if got := c.foundIn(kb, "wombat office", manual.ID, "keyword"); len(got) != 1 {
				t.Errorf("the manual document's chunk did not survive another document's reindex: %v", got)
			}
		})
	}
}

// TestChunkCurationHostile sends what an editor should not be able to
// write, as callers who may not write it, and many edits of one chunk at
// once.
func TestChunkCurationHostile(t *testing.T) {
	f := newAccessFixture(t)
	c := f.admin.forTest(t)
	chunks := c.curatedChunks(f.doc)
	id := chunks[0].ID
	huge := strings.Repeat("word ", service.MaxChunkContent/5+1)
	cases := []struct {
		name   string
		who    string
		method string
		path   string
		body   any
		want   int
	}{
		{"oversized", "admin", "PATCH", "/api/v1/chunks/" + id, map[string]any{"content": huge}, http.StatusRequestEntityTooLarge},
		{"empty", "admin", "PATCH", "/api/v1/chunks/" + id, map[string]any{"content": "   "}, http.StatusBadRequest},
		{"nul", "admin", "PATCH", "/api/v1/chunks/" + id, map[string]any{"content": "a\u0000b"}, http.StatusBadRequest},
		{"nothing", "admin", "PATCH", "/api/v1/chunks/" + id, map[string]any{}, http.StatusBadRequest},
		{"not an id", "admin", "PATCH", "/api/v1/chunks/abc", map[string]any{"enabled": false}, http.StatusBadRequest},
		{"unknown", "admin", "PATCH", "/api/v1/chunks/123456789", map[string]any{"enabled": false}, http.StatusNotFound},
		{"wrong type", "admin", "PATCH", "/api/v1/chunks/" + id, map[string]any{"enabled": "no"}, http.StatusBadRequest},
		{"stale revision", "admin", "PATCH", "/api/v1/chunks/" + id, map[string]any{"enabled": false, "revision": 7}, http.StatusConflict},
		{"viewer", "viewer", "PATCH", "/api/v1/chunks/" + id, map[string]any{"enabled": false}, http.StatusForbidden},
		{"nonmember", "nonmember", "PATCH", "/api/v1/chunks/" + id, map[string]any{"enabled": false}, http.StatusNotFound},
		{"nonmember history", "nonmember", "GET", "/api/v1/chunks/" + id + "/revisions", nil, http.StatusNotFound},
		{"viewer history", "viewer", "GET", "/api/v1/chunks/" + id + "/revisions", nil, http.StatusForbidden},
		{"no such revision", "admin", "POST", "/api/v1/chunks/" + id + "/revisions/99/restore", nil, http.StatusNotFound},
		{"negative revision", "admin", "POST", "/api/v1/chunks/" + id + "/revisions/-1/restore", nil, http.StatusBadRequest},
		{"manual oversized", "admin", "POST", "/api/v1/knowledge-bases/" + f.kb + "/chunks", map[string]any{"content": huge}, http.StatusRequestEntityTooLarge},
		{"manual half a pair", "admin", "POST", "/api/v1/knowledge-bases/" + f.kb + "/chunks", map[string]any{"question": "why?"}, http.StatusBadRequest},
		{"manual viewer", "viewer", "POST", "/api/v1/knowledge-bases/" + f.kb + "/chunks", map[string]any{"content": "x"}, http.StatusForbidden},
		{"manual nonmember", "nonmember", "POST", "/api/v1/documents/" + f.doc + "/chunks", map[string]any{"content": "x"}, http.StatusNotFound},
		{"delete viewer", "viewer", "DELETE", "/api/v1/chunks/" + id, nil, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.clients[tc.who].forTest(t).do(tc.method, tc.path, tc.body)
			if r.Status != tc.want {
				t.Errorf("%s %s as %s: %d %s, want %d", tc.method, tc.path, tc.who, r.Status, r.Body, tc.want)
			}
		})
	}
	if revs := c.revisions(id); len(revs) != 0 {
		t.Fatalf("refused changes left revisions: %+v", revs)
	}

	// Concurrent edits of one chunk by the admin and the editor: each
	// commits as its own revision, in one line.
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		who := []string{"admin", "editor"}[i%2]
		wg.Go(func() {
			cc := &client{t: t, base: f.clients[who].base, token: f.clients[who].token}
			r := cc.do("PATCH", "/api/v1/chunks/"+id, map[string]any{"content": fmt.Sprintf("Concurrent edit number %d of the zebrafish policy.", i)})
			if r.Status != http.StatusOK {
				errs <- fmt.Sprintf("edit %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	revs := c.revisions(id)
	if len(revs) != n {
		t.Fatalf("%d revisions after %d edits", len(revs), n)
	}
	for i := range revs {
		if revs[i].Revision != n-i {
			t.Errorf("revision numbers not linear: %d at %d", revs[i].Revision, i)
		}
		if i+1 < len(revs) && *revs[i].ContentBefore != *revs[i+1].ContentAfter {
			t.Errorf("revision %d starts from %q, revision %d ended with %q", revs[i].Revision, *revs[i].ContentBefore, revs[i+1].Revision, *revs[i+1].ContentAfter)
		}
	}
	final := c.curatedChunks(f.doc)[0]
	if final.Content != *revs[0].ContentAfter || final.Revision != n {
		t.Errorf("chunk %+v, last revision %q", final, *revs[0].ContentAfter)
	}
}
