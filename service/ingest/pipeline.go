package ingest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// MaxExternalIDRunes bounds a pipeline's external id; MaxURLBytes an
// imported URL.
const (
	MaxExternalIDRunes = 512
	MaxURLBytes        = 2048
)

// statuses are the values ?status= may take.
var statuses = []service.DocumentStatus{service.DocumentPending, service.DocumentRunning, service.DocumentReady, service.DocumentFailed}

func checkExternalID(id string) error {
	if id == "" || !utf8.ValidString(id) || utf8.RuneCountInString(id) > MaxExternalIDRunes ||
		strings.IndexFunc(id, unicode.IsControl) >= 0 || strings.TrimSpace(id) != id {
		return service.Errorf(service.ErrInvalid,
			"externalId must be 1 to %d characters of valid UTF-8 without control characters or surrounding spaces", MaxExternalIDRunes)
	}
	return nil
}

// queue makes the ingest message of a new generation, for the store to
// write in the generation's transaction.
func (s *Service) queue(d *service.Document) (service.OutboxMessage, error) {
	return s.ingestMessage(d.ID, d.Generation)
}

// UploadVersion stores a file under the pipeline's external id: the first
// upload creates the document; a later one with other content makes a new
// generation of the same document, whose current chunks stay searchable
// until the new ones replace them in one transaction (a failed new version
// leaves them served, with the document failed and its error). The same
// content again changes nothing: changed is false. Editors only.
func (s *Service) UploadVersion(ctx context.Context, p service.Principal, kbID service.ID, externalID, filename string, body io.Reader) (doc *service.Document, changed bool, err error) {
	ev := service.AuditEvent{Action: service.AuditDocumentUpload, TargetType: service.TargetDocument,
		Detail: fmt.Sprintf("kb=%s externalId=%q", kbID, externalID)}
	if err := checkExternalID(externalID); err != nil {
		s.audit.Fail(ctx, ev, err)
		return nil, false, err
	}
	v, blob, err := s.readUpload(ctx, p, kbID, filename, body)
	if err != nil {
		s.audit.Fail(ctx, ev, err)
		return nil, false, err
	}
	v.ExternalID = externalID
	err = s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		var err error
		if doc, changed, err = s.store.PutVersion(ctx, v, blob, s.queue); err != nil {
			return err
		}
		ev.TargetID = doc.ID.String()
		ev.Detail = fmt.Sprintf("kb=%s externalId=%q name=%s size=%d generation=%d changed=%t",
			kbID, externalID, v.Name, v.Size, doc.Generation, changed)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	s.wakeRelay()
	return doc, changed, nil
}

// FindDocuments lists a knowledge base's documents matching q, newest
// first (viewers): a pipeline's status poll and its external-id lookup.
func (s *Service) FindDocuments(ctx context.Context, p service.Principal, kbID service.ID, q service.DocumentQuery) ([]*service.Document, error) {
	if q.Status != "" && !slices.Contains(statuses, q.Status) {
		return nil, service.Errorf(service.ErrInvalid, "status must be one of pending, running, ready, failed")
	}
	if q.ExternalID != "" {
		if err := checkExternalID(q.ExternalID); err != nil {
			return nil, err
		}
	}
	if _, err := s.access.Require(ctx, p, kbID, service.KBViewer); err != nil {
		return nil, err
	}
	return s.store.FindDocuments(ctx, kbID, q)
}

// DeleteByExternalID deletes the document with a pipeline's external id
// (editors), as Delete does.
func (s *Service) DeleteByExternalID(ctx context.Context, p service.Principal, kbID service.ID, externalID string) error {
	docs, err := s.FindDocuments(ctx, p, kbID, service.DocumentQuery{ExternalID: externalID, Limit: 1})
	if err == nil && len(docs) == 0 {
		err = service.Errorf(service.ErrNotFound, "no document with externalId %q", externalID)
	}
	if err != nil {
		// Delete records its own event; a refused lookup is recorded here.
		s.audit.Fail(ctx, service.AuditEvent{Action: service.AuditDocumentDelete, TargetType: service.TargetDocument,
			Detail: fmt.Sprintf("kb=%s externalId=%q", kbID, externalID)}, err)
		return err
	}
	return s.Delete(ctx, p, docs[0].ID)
}

// Import records a document to be fetched from rawURL by the fetcher (not
// in the caller's request) and returns it pending; with an external id it
// is that document's next version, as in UploadVersion. refresh > 0 fetches
// the URL again that often, skipping unchanged content. Editors only.
func (s *Service) Import(ctx context.Context, p service.Principal, kbID service.ID, rawURL, externalID string, refresh time.Duration) (*service.Document, error) {
	var doc *service.Document
	ev := service.AuditEvent{Action: service.AuditDocumentImport, TargetType: service.TargetDocument,
		Detail: fmt.Sprintf("kb=%s url=%q", kbID, text.Truncate(rawURL, 200))}
	err := s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		d, src, err := s.prepareImport(ctx, p, kbID, rawURL, externalID, refresh)
		if err != nil {
			return err
		}
		if doc, err = s.store.Import(ctx, d, src); err != nil {
			return err
		}
		ev.TargetID = doc.ID.String()
		ev.Detail = fmt.Sprintf("kb=%s url=%q externalId=%q refresh=%s", kbID, text.Truncate(rawURL, 200), externalID, refresh)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.wakeFetcher()
	return doc, nil
}

func (s *Service) prepareImport(ctx context.Context, p service.Principal, kbID service.ID, rawURL, externalID string, refresh time.Duration) (*service.Document, service.DocumentSource, error) {
	var src service.DocumentSource
	if len(rawURL) > MaxURLBytes {
		return nil, src, service.Errorf(service.ErrInvalid, "url is longer than %d bytes", MaxURLBytes)
	}
	u, err := s.cfg.Net.CheckURL(rawURL)
	if err != nil {
		return nil, src, err
	}
	if externalID != "" {
		if err := checkExternalID(externalID); err != nil {
			return nil, src, err
		}
	}
	if refresh < 0 || (refresh > 0 && refresh < s.cfg.MinRefresh) || refresh > 365*24*time.Hour {
		return nil, src, service.Errorf(service.ErrInvalid, "refreshInterval must be 0 (fetch once) or between %s and 8760h", s.cfg.MinRefresh)
	}
	if _, err := s.access.Require(ctx, p, kbID, service.KBEditor); err != nil {
		return nil, src, err
	}
	id, err := s.ids.NextID()
	if err != nil {
		return nil, src, err
	}
	name, err := cleanName(u.Path)
	if err != nil || name == "/" {
		name = u.Hostname()
	}
	d := &service.Document{ID: id, KnowledgeBaseID: kbID, Name: name, ExternalID: externalID, CreatedBy: p.UserID}
	src = service.DocumentSource{URL: u.String(), RefreshSeconds: int(refresh / time.Second)}
	return d, src, nil
}
