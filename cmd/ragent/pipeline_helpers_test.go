package main

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// eventually is testenv.Eventually that also logs the state report returns
// when cond is not reached in time.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool, report func() any) {
	t.Helper()
	reached := false
	defer func() {
		if !reached { // Eventually failed the test and is unwinding it
			t.Logf("%s: last state %+v", what, report())
		}
	}()
	testenv.Eventually(t, timeout, what, cond)
	reached = true
}

// uploadExternal uploads a file under a pipeline's external id (as the
// form field before the file part) and returns the response.
func (c *client) uploadExternal(kbID, externalID, name string, content []byte) response {
	c.t.Helper()
	return c.uploadFields(kbID, name, content, "externalId", externalID)
}

// pipelineDoc is a document with the pipeline fields.
type pipelineDoc struct {
	docJSON
	ExternalID string `json:"externalId"`
	Name       string `json:"name"`
	Mime       string `json:"mime"`
	UpdatedAt  string `json:"updatedAt"`
	Source     *struct {
		URL       string `json:"url"`
		ETag      string `json:"etag"`
		LastError string `json:"lastError"`
		FetchedAt string `json:"fetchedAt"`
	} `json:"source"`
}

// byExternalID looks a document up by external id; nil when there is none.
func (c *client) byExternalID(kbID, externalID string) *pipelineDoc {
	c.t.Helper()
	r := c.do("GET", "/api/v1/knowledge-bases/"+kbID+"/documents?externalId="+url.QueryEscape(externalID), nil)
	if r.Status != http.StatusOK {
		c.t.Fatalf("lookup %s: %d %s", externalID, r.Status, r.Body)
	}
	var l struct{ Items []pipelineDoc }
	r.json(c.t, &l)
	if len(l.Items) == 0 {
		return nil
	}
	return &l.Items[0]
}

// pipelineDocument reads one document with the pipeline fields.
func (c *client) pipelineDocument(id string) pipelineDoc {
	c.t.Helper()
	return getJSON[pipelineDoc](c, "/api/v1/documents/"+id)
}

// waitFor polls a document until cond holds, failing after timeout.
func (c *client) waitFor(id string, timeout time.Duration, what string, cond func(pipelineDoc) bool) pipelineDoc {
	c.t.Helper()
	var d pipelineDoc
	eventually(c.t, timeout, "document "+id+": "+what, func() bool { d = c.pipelineDocument(id); return cond(d) },
		func() any { return []any{d, d.Source} })
	return d
}
