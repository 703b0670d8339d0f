package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

func (c *client) deletedChunks(docID string) []revisionJSON {
	c.t.Helper()
	return getItems[revisionJSON](c, "/api/v1/documents/"+docID+"/deleted-chunks")
}

func (c *client) deleteChunk(id string) {
	c.t.Helper()
	if r := c.do("DELETE", "/api/v1/chunks/"+id, nil); r.Status != http.StatusNoContent {
		c.t.Fatalf("delete chunk %s: %d %s", id, r.Status, r.Body)
	}
}

func (c *client) restoreChunk(id string, n int) (int, curatedChunk) {
	c.t.Helper()
	r := c.do("POST", fmt.Sprintf("/api/v1/chunks/%s/revisions/%d/restore", id, n), nil)
	var out curatedChunk
	if r.Status == http.StatusOK {
		r.json(c.t, &out)
	}
	return r.Status, out
}

// restoreDoc is three sections, one chunk each at the knowledge base's
// small chunk size.
const restoreDoc = "# Leave\n\nThe zebrafish policy grants fifteen days of paid leave per year.\n\n" +
	"# Travel\n\nThe okapi rule books economy class for flights under six hours.\n\n" +
	"# Equipment\n\nThe narwhal budget buys one laptop every three years.\n"

// TestRestoreDeletedChunk deletes chunks and brings them back from their
// history: the deletion is listed, the restore puts the chunk back at its
// place and section, searchable in every mode on both backends when the
// API answers, audited; a restore after a reindex, of the deleting
// revision, or of the same chunk by many at once is refused or
// serialized.
func TestRestoreDeletedChunk(t *testing.T) {
	for _, b := range curationBackends {
		t.Run(b.name, func(t *testing.T) {
			_, c, _ := ingestEnv(t, b.cfg(t))
			kb := c.createKBWith("restore-"+b.name, 64)
			doc := c.uploadAccepted(kb, "handbook.md", []byte(restoreDoc))
			c.waitReady(doc.ID)
			chunks := c.curatedChunks(doc.ID)
			if len(chunks) != 3 {
				t.Fatalf("want 3 chunks, got %+v", chunks)
			}
			all := []string{"keyword", "vector", "hybrid"}
			travel := chunks[1]
			if !strings.Contains(travel.Content, "okapi") || travel.Section == "" {
				t.Fatalf("second chunk %+v", travel)
			}
			if got := c.deletedChunks(doc.ID); len(got) != 0 {
				t.Fatalf("deletions before any: %+v", got)
			}

			// Edit, then delete: the history lists the deletion, the
			// document's deletions list it with its text and place.
			c.patchChunk(travel.ID, map[string]any{"content": "The okapi rule books business class for flights over six hours."})
			c.deleteChunk(travel.ID)
			if got := c.foundIn(kb, "okapi rule business class", travel.ID, all...); len(got) != 0 {
				t.Fatalf("a deleted chunk is retrieved: %v", got)
			}
			dels := c.deletedChunks(doc.ID)
			if len(dels) != 1 || dels[0].ChunkID != travel.ID || dels[0].Action != "delete" || dels[0].Revision != 2 ||
				dels[0].ContentBefore == nil || !strings.Contains(*dels[0].ContentBefore, "business class") ||
				dels[0].Ordinal == nil || *dels[0].Ordinal != travel.Ordinal || dels[0].Section != travel.Section {
				t.Fatalf("deletions: %+v", dels)
			}
			if d := c.document(doc.ID); d.ChunkCount != 2 {
				t.Errorf("chunk count after the deletion: %d", d.ChunkCount)
			}

			// The deleting revision itself has no state to go back to.
			if st, _ := c.restoreChunk(travel.ID, 2); st != http.StatusNotFound {
				t.Errorf("restore to the deleting revision: %d, want 404", st)
			}
			if st, _ := c.restoreChunk(travel.ID, 9); st != http.StatusNotFound {
				t.Errorf("restore to a revision it never had: %d, want 404", st)
			}

			// Back to the edit (revision 1), at once searchable everywhere.
			st, back := c.restoreChunk(travel.ID, 1)
			if st != http.StatusOK {
				t.Fatalf("restore a deleted chunk: %d", st)
			}
			if back.ID != travel.ID || back.Ordinal != travel.Ordinal || back.Section != travel.Section || back.Revision != 3 ||
				!back.Enabled || back.Manual || !strings.Contains(back.Content, "business class") {
				t.Errorf("restored %+v, was %+v", back, travel)
			}
			if got := c.foundIn(kb, "okapi rule business class", travel.ID, all...); len(got) != 3 {
				t.Errorf("a restored chunk is not searchable at once: found in %v", got)
			}
			if got := c.deletedChunks(doc.ID); len(got) != 0 {
				t.Errorf("a restored deletion is still listed: %+v", got)
			}
			now := c.curatedChunks(doc.ID)
			if len(now) != 3 || now[1].ID != travel.ID {
				t.Errorf("chunks after the restore: %+v", now)
			}
			if d := c.document(doc.ID); d.ChunkCount != 3 {
				t.Errorf("chunk count after the restore: %d", d.ChunkCount)
			}
			var actions []string
			for _, r := range c.revisions(travel.ID) {
				actions = append(actions, r.Action)
			}
			if want := []string{"restore", "delete", "edit"}; !slices.Equal(actions, want) {
				t.Errorf("history %v, want %v", actions, want)
			}
			r := c.do("GET", "/api/v1/admin/audit?action=chunk.restore&result=success", nil)
			if r.Status != http.StatusOK || !strings.Contains(string(r.Body), travel.ID) || !strings.Contains(string(r.Body), "deleted at revision 2") {
				t.Errorf("audit of the restore: %d %s", r.Status, r.Body)
			}

			// Delete again and restore to the text as parsed (revision 0).
			c.deleteChunk(travel.ID)
			if st, back = c.restoreChunk(travel.ID, 0); st != http.StatusOK || back.Content != travel.Content {
				t.Errorf("restore as parsed: %d %+v", st, back)
			}
			if got := c.foundIn(kb, "okapi economy class flights", travel.ID, all...); len(got) != 3 {
				t.Errorf("the parsed text is not searchable after the restore: %v", got)
			}

			// A disabled chunk deleted comes back disabled: listed, never
			// retrieved.
			equip := chunks[2]
			c.patchChunk(equip.ID, map[string]any{"enabled": false})
			c.deleteChunk(equip.ID)
			if st, back = c.restoreChunk(equip.ID, 1); st != http.StatusOK || back.Enabled {
				t.Errorf("restore a disabled chunk: %d %+v", st, back)
			}
			if got := c.foundIn(kb, "narwhal budget laptop", equip.ID, all...); len(got) != 0 {
				t.Errorf("a chunk restored disabled is retrieved: %v", got)
			}
			c.patchChunk(equip.ID, map[string]any{"enabled": true})
			if got := c.foundIn(kb, "narwhal budget laptop", equip.ID, all...); len(got) != 3 {
				t.Errorf("a chunk restored disabled, then enabled, is not retrieved: %v", got)
			}

			// A manual chunk stays manual; it goes after the last chunk
			// when its place was taken meanwhile.
			r = c.do("POST", "/api/v1/documents/"+doc.ID+"/chunks", map[string]any{"question": "Who signs capybara travel?", "answer": "The capybara desk."})
			var added curatedChunk
			r.json(t, &added)
			c.deleteChunk(added.ID)
			r = c.do("POST", "/api/v1/documents/"+doc.ID+"/chunks", map[string]any{"content": "The wombat office takes the free place."})
			var taker curatedChunk
			r.json(t, &taker)
			if taker.Ordinal != added.Ordinal {
				t.Fatalf("the new chunk did not take the deleted one's place: %d vs %d", taker.Ordinal, added.Ordinal)
			}
			if st, back = c.restoreChunk(added.ID, 1); st != http.StatusOK || !back.Manual || back.Ordinal != taker.Ordinal+1 {
				t.Errorf("restore a manual chunk whose place is taken: %d %+v", st, back)
			}
			if got := c.foundIn(kb, "capybara desk", added.ID, all...); len(got) != 3 {
				t.Errorf("the restored manual chunk is not searchable: %v", got)
			}

			// Many restores of one deleted chunk at once: one chunk, one
			// line of revisions.
			lead := chunks[0]
			c.deleteChunk(lead.ID)
			const n = 6
			var wg sync.WaitGroup
			codes := make(chan int, n)
			for range n {
				wg.Go(func() {
					cc := &client{t: t, base: c.base, token: c.token}
					st, _ := cc.restoreChunk(lead.ID, 0)
					codes <- st
				})
			}
			wg.Wait()
			close(codes)
			ok := 0
			for st := range codes {
				switch st {
				case http.StatusOK:
					ok++
				case http.StatusConflict:
				default:
					t.Errorf("concurrent restore: %d", st)
				}
			}
			if ok == 0 {
				t.Errorf("no concurrent restore succeeded")
			}
			revs := c.revisions(lead.ID)
			for i := range revs {
				if revs[i].Revision != len(revs)-i {
					t.Errorf("revisions not linear: %+v", revs)
				}
			}
			hits := 0
			for _, h := range c.search(kb, "zebrafish policy fifteen days", "keyword") {
				if h.ChunkID == lead.ID {
					hits++
				}
			}
			if hits != 1 {
				t.Errorf("the restored chunk is found %d times", hits)
			}

			// A reindex gives the document its file's chunks again: a
			// deletion before it is no longer listed nor restorable.
			c.deleteChunk(lead.ID)
			if r := c.do("POST", "/api/v1/documents/"+doc.ID+"/reindex", nil); r.Status != http.StatusAccepted {
				t.Fatalf("reindex: %d %s", r.Status, r.Body)
			}
			c.waitReady(doc.ID)
			if got := c.deletedChunks(doc.ID); len(got) != 0 {
				t.Errorf("deletions listed after a reindex: %+v", got)
			}
			if st, _ := c.restoreChunk(lead.ID, 0); st != http.StatusConflict {
				t.Errorf("restore after a reindex: %d, want 409", st)
			}
		})
	}
}

// TestRestoreDeletedChunkAccess: a deleted chunk's history and restore
// are its knowledge base's editors'; to others it is as absent as any.
func TestRestoreDeletedChunkAccess(t *testing.T) {
	f := newAccessFixture(t)
	admin := f.admin.forTest(t)
	id := f.freshChunk(t)
	admin.deleteChunk(id)
	for who, want := range map[string]int{"viewer": http.StatusForbidden, "nonmember": http.StatusNotFound} {
		c := f.clients[who].forTest(t)
		if st, _ := c.restoreChunk(id, 1); st != want {
			t.Errorf("%s restores a deleted chunk: %d, want %d", who, st, want)
		}
		if r := c.do("GET", "/api/v1/chunks/"+id+"/revisions", nil); r.Status != want {
			t.Errorf("%s reads a deleted chunk's history: %d, want %d", who, r.Status, want)
		}
	}
	if st, back := f.clients["editor"].forTest(t).restoreChunk(id, 1); st != http.StatusOK || back.ID != id {
		t.Errorf("editor restores a deleted chunk: %d %+v", st, back)
	}
}
