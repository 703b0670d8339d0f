package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"path"
	"time"

	"github.com/ragent-go/ragent/service"
)

func (s *Service) wakeFetcher() { wake(s.fetchNow) }

// RunFetcher fetches imported documents that are due (new imports and
// refreshes) until ctx ends: at once after an import on this instance, and
// every FetchInterval for the rest. Up to FetchConcurrency fetches run at
// once, at most FetchPerKB of one knowledge base (across all instances), so
// one knowledge base's slow URLs do not hold the others' imports. Every
// instance may run it: documents are claimed with a lease, one fetcher each.
func (s *Service) RunFetcher(ctx context.Context) error {
	return s.runPool(ctx, s.cfg.FetchInterval, s.fetchNow, s.cfg.FetchConcurrency, "fetcher failed", s.claimFetches)
}

// runPool runs up to slots jobs at once until ctx ends: it claims as many
// as there are free slots, then again when a job ends, on every tick and
// on every wake (nil: none), and waits for the running jobs before it
// returns. A failed claim is logged as failed.
func (s *Service) runPool(ctx context.Context, every time.Duration, wake <-chan struct{}, slots int, failed string,
	claim func(ctx context.Context, n int) ([]func(context.Context), error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	done := make(chan struct{}, slots)
	running := 0
	for {
		if free := slots - running; free > 0 && ctx.Err() == nil {
			jobs, err := claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, failed, "err", err)
			}
			for _, job := range jobs {
				running++
				go func() {
					defer func() { done <- struct{}{} }()
					job(ctx)
				}()
			}
		}
		select {
		case <-ctx.Done():
			for ; running > 0; running-- {
				<-done
			}
			return nil
		case <-done:
			running--
		case <-t.C:
		case <-wake:
		}
	}
}

// claimFetches claims up to n due imports and returns their fetches.
func (s *Service) claimFetches(ctx context.Context, n int) ([]func(context.Context), error) {
	// The lease outlives one fetch, so no other instance takes a document
	// still being fetched here.
	docs, err := s.store.ClaimDueSources(ctx, s.cfg.FetchTimeout+time.Minute, n, s.cfg.FetchPerKB)
	if err != nil {
		return nil, err
	}
	return poolJobs(docs, s.fetchOne), nil
}

// poolJobs makes runPool's jobs of claimed items: one run of each.
func poolJobs[T any](items []T, run func(context.Context, T)) []func(context.Context) {
	jobs := make([]func(context.Context), len(items))
	for i, item := range items {
		jobs[i] = func(ctx context.Context) { run(ctx, item) }
	}
	return jobs
}

// fetchOne fetches a claimed import and records what came back.
func (s *Service) fetchOne(ctx context.Context, d *service.Document) {
	f, detail := s.fetch(ctx, d)
	doc, err := s.store.FinishFetch(context.WithoutCancel(ctx), d.ID, f, s.queue)
	if errors.Is(err, service.ErrConflict) {
		// Another document of the knowledge base has these bytes: say so
		// on this one.
		f = service.Fetched{Err: duplicate(err).String()}
		doc, err = s.store.FinishFetch(context.WithoutCancel(ctx), d.ID, f, s.queue)
	}
	if err != nil {
		// The database: the lease runs out and the next claim tries again.
		s.log.WarnContext(ctx, "recording a fetch failed", "document", d.ID, "err", err)
		return
	}
	switch {
	case f.Err != "":
		s.log.WarnContext(ctx, "fetch failed", "document", d.ID, "url", d.Source.URL, "err", f.Err, "detail", detail)
	case f.Version != nil:
		s.log.InfoContext(ctx, "fetched a new version", "document", d.ID, "generation", doc.Generation, "bytes", f.Version.Size)
		s.wakeRelay()
	}
}

// fetch GETs an import's URL, conditionally when it has content already.
// A failed fetch's Err is a failure's stable text; the cause, which may
// name internal addresses, is returned apart for the log.
func (s *Service) fetch(ctx context.Context, d *service.Document) (service.Fetched, error) {
	failed := func(f failure, cause error) (service.Fetched, error) { return service.Fetched{Err: f.String()}, cause }
	if d.Source == nil {
		return failed(failure{codeFetchFailed, "the document has no source"}, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.Source.URL, nil)
	if err != nil {
		return failed(failure{codeFetchFailed, "the URL cannot be requested"}, err)
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
		return failed(requestFailure(err, s.cfg.FetchTimeout, "the server"), err)
	}
	defer resp.Body.Close()
	f := service.Fetched{ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return f, nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return failed(statusFailure("the server", resp), nil)
	}
	tooLarge := failure{codeTooLarge, fmt.Sprintf("the file exceeds the upload limit of %d bytes", s.cfg.MaxBytes)}
	if resp.ContentLength > s.cfg.MaxBytes {
		return failed(tooLarge, nil)
	}
	blob, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBytes+1))
	if err != nil {
		return failed(requestFailure(err, s.cfg.FetchTimeout, "the server"), err)
	}
	if int64(len(blob)) > s.cfg.MaxBytes {
		return failed(tooLarge, nil)
	}
	v := newVersion(d.ID, d.KnowledgeBaseID, fetchedName(d.Name, resp.Header.Get("Content-Type")), blob)
	if v.SHA256 == d.SHA256 {
		return f, nil // the same bytes: nothing to ingest
	}
	f.Version, f.Blob = v, blob
	return f, nil
}

// The codes of failed fetches and webhook deliveries, the first word of
// what documents (error, source.lastError) and webhooks (lastError) show.
const (
	codeAddressNotAllowed = "address_not_allowed"
	codeTimeout           = "timeout"
	codeTooLarge          = "too_large"
	codeHTTPStatus        = "http_status"
	codeRedirect          = "redirect_not_allowed"
	codeFetchFailed       = "fetch_failed"
	codeDuplicate         = "duplicate"
	codeCreatorNoAccess   = "creator_no_access"
	codeSecret            = "secret_unreadable"
)

// failure is why a fetch or a delivery failed, as users see it: a stable
// code and a message that names no address (where a name resolved to and
// the resolver's own address are internal; the log has the cause).
type failure struct{ code, msg string }

func (f failure) String() string { return f.code + ": " + f.msg }

// requestFailure says why a request to who ("the server", "the receiver")
// failed.
func requestFailure(err error, timeout time.Duration, who string) failure {
	var ne net.Error
	switch {
	case errors.Is(err, errBlockedAddress):
		return failure{codeAddressNotAllowed, "the URL leads to an address that is not allowed " +
			"(loopback, private or otherwise not public; an administrator may allow networks with RAGENT_FETCH_ALLOW_NETWORKS)"}
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return failure{codeTimeout, fmt.Sprintf("no complete answer within %s", timeout)}
	case errors.Is(err, errTooManyRedirects) || errors.Is(err, service.ErrInvalid):
		return failure{codeRedirect, "a redirect went too far or to a URL that is not allowed"}
	}
	return failure{codeFetchFailed, who + " could not be reached, or broke off its answer"}
}

// statusFailure says that who answered a status other than 2xx.
func statusFailure(who string, resp *http.Response) failure {
	return failure{codeHTTPStatus, fmt.Sprintf("%s answered %d %s", who, resp.StatusCode, http.StatusText(resp.StatusCode))}
}

// duplicate says that the fetched bytes are another document's.
func duplicate(err error) failure {
	msg := "this file is already in the knowledge base"
	var e *service.Error
	if errors.As(err, &e) && e.Details["documentId"] != "" {
		msg += " as document " + e.Details["documentId"]
	}
	return failure{codeDuplicate, msg}
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
