package main

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

type feedbackJSON struct {
	ID               string   `json:"id"`
	MessageID        string   `json:"messageId"`
	Rating           string   `json:"rating"`
	Comment          string   `json:"comment"`
	Question         string   `json:"question"`
	Answer           string   `json:"answer"`
	RelevantChunkIDs []string `json:"relevantChunkIds"`
	Sources          []struct {
		ChunkID string `json:"chunkId"`
	} `json:"sources"`
}

// answerIDs asks a question and returns the conversation's and the
// answer's message ids.
func answerIDs(t *testing.T, c *client, question, kb string) (conv, msg string) {
	t.Helper()
	_, events := c.forTest(t).chatStream(context.Background(), map[string]any{"question": question, "knowledgeBaseIds": []string{kb}}, nil)
	if got := collapse(events); got != "meta sources message finish done" {
		t.Fatalf("chat: %q", got)
	}
	meta := events[0].json(t)
	return meta["conversationId"].(string), meta["messageId"].(string)
}

// TestAnswerFeedback rates answers from the chat API and the
// OpenAI-compatible one, as their users and as others, lists them on the
// admin page with its filters, marks the right chunk of a downvoted answer
// and exports it, through the API and the command, as a BEIR folder that
// `ragent eval` scores.
func TestAnswerFeedback(t *testing.T) {
	f := newAccessFixture(t)
	admin := f.admin.forTest(t)
	viewer := f.clients["viewer"].forTest(t)
	// A second document holds the right answer the first answer missed.
	right := admin.uploadAccepted(f.kb, "carryover.md", []byte("# Carry-over\n\nUnused zebrafish leave days carry over until March.\n"))
	admin.waitReady(right.ID)
	rightChunk := admin.curatedChunks(right.ID)[0].ID

	_, msg := answerIDs(t, viewer, "How many days does the zebrafish policy grant?", f.kb)
	r := viewer.do("POST", "/api/v1/messages/"+msg+"/feedback", map[string]any{"rating": "up"})
	if r.Status != http.StatusOK {
		t.Fatalf("rate: %d %s", r.Status, r.Body)
	}
	var first feedbackJSON
	r.json(t, &first)
	r = viewer.do("POST", "/api/v1/messages/"+msg+"/feedback", map[string]any{"rating": "down", "comment": "misses the carry-over rule"})
	var again feedbackJSON
	r.json(t, &again)
	if r.Status != http.StatusOK || again.ID != first.ID || again.Rating != "down" {
		t.Fatalf("rating again replaces: %d %s (first %s)", r.Status, r.Body, first.ID)
	}

	// The OpenAI-compatible endpoint's completion id names its message.
	r = viewer.do("POST", "/v1/chat/completions", map[string]any{"model": "ragent/" + f.kb,
		"messages": []map[string]string{{"role": "user", "content": "zebrafish leave?"}}})
	var completion struct{ ID string }
	r.json(t, &completion)
	if r.Status != http.StatusOK || !strings.HasPrefix(completion.ID, "chatcmpl-") {
		t.Fatalf("completion: %d %s", r.Status, r.Body)
	}
	if r := viewer.do("POST", "/api/v1/messages/"+completion.ID+"/feedback", map[string]any{"rating": "up"}); r.Status != http.StatusOK {
		t.Errorf("rate a completion by its id: %d %s", r.Status, r.Body)
	}

	// Hostile and foreign ratings.
	var msgs struct{ Messages []struct{ ID, Role string } }
	viewer.do("GET", "/api/v1/conversations/"+f.conv+"/messages", nil).json(t, &msgs)
	question := msgs.Messages[0].ID
	for _, tc := range []struct {
		name string
		c    *client
		path string
		body any
		want int
	}{
		{"editor rates the viewer's answer", f.clients["editor"].forTest(t), msg, map[string]any{"rating": "down"}, http.StatusNotFound},
		{"nonmember", f.clients["nonmember"].forTest(t), msg, map[string]any{"rating": "down"}, http.StatusNotFound},
		{"a question", viewer, question, map[string]any{"rating": "down"}, http.StatusBadRequest},
		{"not an id", viewer, "xyz", map[string]any{"rating": "down"}, http.StatusBadRequest},
		{"unknown id", viewer, "987654321", map[string]any{"rating": "down"}, http.StatusNotFound},
		{"bad rating", viewer, msg, map[string]any{"rating": "meh"}, http.StatusBadRequest},
		{"oversized comment", viewer, msg, map[string]any{"rating": "down", "comment": strings.Repeat("é", service.MaxFeedbackComment+1)}, http.StatusRequestEntityTooLarge},
		{"nul comment", viewer, msg, map[string]any{"rating": "down", "comment": "a\u0000"}, http.StatusBadRequest},
		{"admin sees every conversation", admin, msg, map[string]any{"rating": "down", "comment": "admin agrees"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := tc.c.do("POST", "/api/v1/messages/"+tc.path+"/feedback", tc.body); r.Status != tc.want {
				t.Errorf("%d %s, want %d", r.Status, r.Body, tc.want)
			}
		})
	}

	// The admin page and its filters.
	list := func(query string) []feedbackJSON {
		t.Helper()
		return getItems[feedbackJSON](admin.forTest(t), "/api/v1/admin/feedback?"+query)
	}
	down := list("rating=down&knowledgeBaseId=" + f.kb)
	if len(down) != 2 || down[1].Comment != "misses the carry-over rule" || !strings.Contains(down[1].Question, "zebrafish") ||
		down[1].Answer == "" || len(down[1].Sources) == 0 {
		t.Fatalf("downvotes: %+v", down)
	}
	if got := list("rating=up"); len(got) != 1 {
		t.Errorf("upvotes: %+v", got)
	}
	if got := list("knowledgeBaseId=" + f.otherKB); len(got) != 0 {
		t.Errorf("another knowledge base's feedback: %+v", got)
	}
	if got := list("since=" + time.Now().Add(24*time.Hour).Format(time.DateOnly)); len(got) != 0 {
		t.Errorf("feedback from tomorrow: %+v", got)
	}
	if r := admin.do("GET", "/api/v1/admin/feedback?since=yesterday", nil); r.Status != http.StatusBadRequest {
		t.Errorf("bad since: %d", r.Status)
	}
	if r := f.clients["manager"].forTest(t).do("GET", "/api/v1/admin/feedback", nil); r.Status != http.StatusForbidden {
		t.Errorf("a manager reads the feedback page: %d", r.Status)
	}

	// Judging: the right chunk, of the answer's knowledge base only.
	fb := down[1].ID
	if r := admin.do("PUT", "/api/v1/admin/feedback/"+fb+"/chunks", map[string]any{"chunkIds": []string{"123"}}); r.Status != http.StatusBadRequest {
		t.Errorf("an unknown chunk marked right: %d %s", r.Status, r.Body)
	}
	if r := admin.do("GET", "/api/v1/admin/feedback/export", nil); r.Status != http.StatusNotFound {
		t.Errorf("export with nothing judged: %d %s", r.Status, r.Body)
	}
	r = admin.do("PUT", "/api/v1/admin/feedback/"+fb+"/chunks", map[string]any{"chunkIds": []string{rightChunk}})
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), rightChunk) {
		t.Fatalf("judge: %d %s", r.Status, r.Body)
	}

	// The button's zip and the command's folder hold the same set.
	r = admin.do("GET", "/api/v1/admin/feedback/export?knowledgeBaseId="+f.kb, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("export: %d %s", r.Status, r.Body)
	}
	zr, err := zip.NewReader(bytes.NewReader(r.Body), int64(len(r.Body)))
	if err != nil {
		t.Fatalf("export is not a zip: %v", err)
	}
	zipped := map[string]string{}
	for _, zf := range zr.File {
		rc, _ := zf.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		zipped[zf.Name[strings.Index(zf.Name, "/")+1:]] = string(b)
	}
	dir := filepath.Join(t.TempDir(), "feedback")
	var out bytes.Buffer
	if err := exportFeedbackCommand(context.Background(), f.in.app.cfg, testLogger(t), []string{"--out", dir, "--knowledge-base", f.kb}, &out, io.Discard); err != nil {
		t.Fatalf("export-feedback: %v", err)
	}
	if !strings.Contains(out.String(), "queries=1") {
		t.Errorf("export-feedback: %s", out.String())
	}
	for _, name := range []string{"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != zipped[name] {
			t.Errorf("%s: the folder and the zip differ (%v):\n%s\n---\n%s", name, err, b, zipped[name])
		}
	}
	if !strings.Contains(zipped["qrels/test.tsv"], msg+"\t"+rightChunk+"\t1") || !strings.Contains(zipped["queries.jsonl"], "zebrafish") {
		t.Errorf("export: %v", zipped)
	}

	// Round trip: ragent eval scores the exported set.
	out.Reset()
	if err := evalCommand(context.Background(), f.in.app.cfg, testLogger(t), []string{"--dataset", dir, "--mode", "keyword"}, &out, io.Discard); err != nil {
		t.Fatalf("eval of the export: %v\n%s", err, out.String())
	}
	for _, want := range []string{"failed=0", "mode=keyword ndcg@10=", "queries=1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("eval output lacks %q:\n%s", want, out.String())
		}
	}
}
