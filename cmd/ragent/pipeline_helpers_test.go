package main

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"
)

// uploadExternal uploads a file under a pipeline's external id (as the
// form field before the file part) and returns the response.
func (c *client) uploadExternal(kbID, externalID, name string, content []byte) response {
	c.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.WriteField("externalId", externalID); err != nil {
		c.t.Fatal(err)
	}
	w, err := mw.CreateFormFile("file", name)
	if err != nil {
		c.t.Fatal(err)
	}
	w.Write(content)
	mw.Close()
	return c.do("POST", "/api/v1/knowledge-bases/"+kbID+"/documents", buf.Bytes(), "Content-Type", mw.FormDataContentType())
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
	r := c.do("GET", "/api/v1/documents/"+id, nil)
	if r.Status != http.StatusOK {
		c.t.Fatalf("get document %s: %d %s", id, r.Status, r.Body)
	}
	var d pipelineDoc
	r.json(c.t, &d)
	return d
}

// waitFor polls a document until cond holds, failing after timeout.
func (c *client) waitFor(id string, timeout time.Duration, what string, cond func(pipelineDoc) bool) pipelineDoc {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d := c.pipelineDocument(id)
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("document %s: %s not reached after %s: %+v %+v", id, what, timeout, d, d.Source)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
