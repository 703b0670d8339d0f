package admin

import (
	"context"
	"time"

	"github.com/ragent-go/ragent/service"
)

// AuditStore reads the audit log.
type AuditStore interface {
	AuditEvents(ctx context.Context, f service.AuditFilter) ([]*service.AuditEvent, error)
}

// Audit reads the append-only audit log (admins). Nothing here changes it:
// events are written by the use cases they record, through service.Auditor.
type Audit struct {
	store AuditStore
}

// NewAudit returns the audit-log reader.
func NewAudit(store AuditStore) *Audit { return &Audit{store: store} }

// MaxAuditPage bounds one page of events.
const MaxAuditPage = 200

// List returns the events f selects, newest first, and the cursor of the
// next page (0 when this page is the last).
func (a *Audit) List(ctx context.Context, p service.Principal, f service.AuditFilter) ([]*service.AuditEvent, service.ID, error) {
	if !p.IsAdmin() {
		return nil, 0, service.Errorf(service.ErrForbidden, "only admins read the audit log")
	}
	if f.Result != "" && !f.Result.Valid() {
		return nil, 0, service.Errorf(service.ErrInvalid, "unknown result %q", f.Result)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return nil, 0, service.Errorf(service.ErrInvalid, "until must be after since")
	}
	if f.Limit <= 0 || f.Limit > MaxAuditPage {
		f.Limit = 50
	}
	want := f.Limit
	// One more than asked tells whether a next page exists.
	f.Limit++
	events, err := a.store.AuditEvents(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	var next service.ID
	if len(events) > want {
		events = events[:want]
		next = events[want-1].ID
	}
	for _, e := range events {
		e.At = e.At.UTC().Truncate(time.Microsecond)
	}
	return events, next, nil
}
