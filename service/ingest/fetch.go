package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// fetchBatch is how many due imports one claim takes.
const fetchBatch = 10

func (s *Service) wakeFetcher() {
	select {
	case s.fetchNow <- struct{}{}:
	default:
	}
}

// RunFetcher fetches imported documents that are due (new imports and
// refreshes) until ctx ends: at once after an import on this instance, and
// every FetchInterval for the rest. Every instance may run it: documents
// are claimed with a lease, one fetcher each.
func (s *Service) RunFetcher(ctx context.Context) error {
	return s.drainEvery(ctx, s.cfg.FetchInterval, s.fetchNow, fetchBatch, "fetcher failed", s.FetchDue)
}

// drainEvery runs claim until it takes less than a full batch (or fails,
// logged as failed), then waits for the next tick or wake (nil: ticks
// only), until ctx ends.
func (s *Service) drainEvery(ctx context.Context, every time.Duration, wake <-chan struct{}, batch int, failed string,
	claim func(context.Context) (int, error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := claim(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, failed, "err", err)
			}
			if err != nil || n < batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}

// FetchDue claims up to one batch of due imports, fetches them and records
// what came back; it returns how many it claimed.
func (s *Service) FetchDue(ctx context.Context) (int, error) {
	// The lease outlives the fetches of the batch, done one after another,
	// so no other instance takes a document still being fetched here.
	docs, err := s.store.ClaimDueSources(ctx, fetchBatch*s.cfg.FetchTimeout+time.Minute, fetchBatch)
	if err != nil {
		return 0, err
	}
	for _, d := range docs {
		f := s.fetch(ctx, d)
		doc, err := s.store.FinishFetch(context.WithoutCancel(ctx), d.ID, f, s.queue)
		if errors.Is(err, service.ErrConflict) {
			// Another document of the knowledge base has these bytes: say
			// so on this one.
			f = service.Fetched{Err: "fetch: " + err.Error()}
			doc, err = s.store.FinishFetch(context.WithoutCancel(ctx), d.ID, f, s.queue)
		}
		if err != nil {
			// The database: the lease runs out and the next claim tries
			// again.
			s.log.WarnContext(ctx, "recording a fetch failed", "document", d.ID, "err", err)
			continue
		}
		switch {
		case f.Err != "":
			s.log.WarnContext(ctx, "fetch failed", "document", d.ID, "url", d.Source.URL, "err", f.Err)
		case f.Version != nil:
			s.log.InfoContext(ctx, "fetched a new version", "document", d.ID, "generation", doc.Generation, "bytes", f.Version.Size)
			s.wakeRelay()
		}
	}
	return len(docs), nil
}

// fetch GETs an import's URL, conditionally when it has content already.
func (s *Service) fetch(ctx context.Context, d *service.Document) service.Fetched {
	if d.Source == nil {
		return service.Fetched{Err: "the document has no source"}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.Source.URL, nil)
	if err != nil {
		return service.Fetched{Err: "fetch: " + err.Error()}
	}
	req.Header.Set("User-Agent", "ragent-fetcher")
	// Conditional once there is content: the same content again is never
	// re-ingested, not even after its ingestion failed (it would fail the
	// same way, and notify again, on every refresh).
	if d.SHA256 != "" {
		if d.Source.ETag != "" {
			req.Header.Set("If-None-Match", d.Source.ETag)
		}
		if d.Source.LastModified != "" {
			req.Header.Set("If-Modified-Since", d.Source.LastModified)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return service.Fetched{Err: fetchError(err, s.cfg.FetchTimeout)}
	}
	defer resp.Body.Close()
	f := service.Fetched{ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return f
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return service.Fetched{Err: fmt.Sprintf("fetch: the server answered %s", resp.Status)}
	}
	tooLarge := service.Fetched{Err: fmt.Sprintf("fetch: the file exceeds the upload limit of %d bytes", s.cfg.MaxBytes)}
	if resp.ContentLength > s.cfg.MaxBytes {
		return tooLarge
	}
	blob, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBytes+1))
	if err != nil {
		return service.Fetched{Err: fetchError(err, s.cfg.FetchTimeout)}
	}
	if int64(len(blob)) > s.cfg.MaxBytes {
		return tooLarge
	}
	v := newVersion(d.ID, d.KnowledgeBaseID, fetchedName(d.Name, resp.Header.Get("Content-Type")), blob)
	if v.SHA256 == d.SHA256 {
		return f // the same bytes: nothing to ingest
	}
	f.Version, f.Blob = v, blob
	return f
}

// fetchError says why a fetch failed, without the URL (the document has it).
func fetchError(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, errBlockedAddress):
		return "fetch refused: " + blockedReason(err)
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		return fmt.Sprintf("fetch: no complete answer within %s", timeout)
	}
	return "fetch: " + err.Error()
}

// blockedReason is the policy's own message inside a wrapped dial error.
func blockedReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, errBlockedAddress.Error()); i >= 0 {
		return msg[i:]
	}
	return msg
}

// fetchedName gives a fetched file an extension from its Content-Type when
// the URL's name has none, so sniffing tells HTML, Markdown and CSV from
// plain text as it does for uploads.
func fetchedName(name, contentType string) string {
	if path.Ext(name) != "" {
		return name
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	ext := map[string]string{
		"text/html": ".html", "application/xhtml+xml": ".html", "text/markdown": ".md", "text/csv": ".csv",
		"text/plain": ".txt", "application/pdf": ".pdf",
	}[mt]
	return name + ext
}
