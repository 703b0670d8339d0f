package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// TermStore keeps term mappings. An enabled mapping whose source term is
// already enabled (ignoring case) is refused with service.ErrConflict.
type TermStore interface {
	TermMapping(ctx context.Context, id service.ID) (*service.TermMapping, error)
	CreateTermMapping(ctx context.Context, m *service.TermMapping) error
	UpdateTermMapping(ctx context.Context, m *service.TermMapping) error
	DeleteTermMapping(ctx context.Context, id service.ID) error
}

// TermReader reads every mapping, enabled or not, highest priority first.
// The cache satisfies it (falling back to Postgres), and so does the store.
type TermReader interface {
	TermMappings(ctx context.Context) ([]service.TermMapping, error)
}

// Terms manages the term mappings that rewrite jargon in questions.
type Terms struct {
	store TermStore
	read  TermReader
	ids   service.IDGenerator
	audit *service.Auditor
	cached
}

// NewTerms returns the term-mapping use case. read serves the list (usually
// the cache); cache is invalidated after every committed write; every
// change is recorded in audit.
func NewTerms(store TermStore, read TermReader, cache Invalidator, ids service.IDGenerator, audit *service.Auditor, cfg Config) *Terms {
	return &Terms{store: store, read: read, ids: ids, audit: audit, cached: newCached(cache, "term mappings", cfg)}
}

// TermInput is a whole mapping as an admin submits it (PUT replaces every
// field). Enabled defaults to true when omitted.
type TermInput struct {
	SourceTerm string `json:"sourceTerm"`
	TargetTerm string `json:"targetTerm"`
	Priority   int    `json:"priority"`
	Enabled    *bool  `json:"enabled"`
}

func (in TermInput) mapping(id service.ID) (*service.TermMapping, error) {
	m := &service.TermMapping{
		ID: id, SourceTerm: strings.TrimSpace(in.SourceTerm), TargetTerm: strings.TrimSpace(in.TargetTerm),
		Priority: in.Priority, Enabled: in.Enabled == nil || *in.Enabled,
	}
	for _, f := range []struct {
		field, value string
		max          int
	}{{"sourceTerm", m.SourceTerm, service.MaxSourceTermRunes}, {"targetTerm", m.TargetTerm, service.MaxTargetTermRunes}} {
		if err := requireText(f.field, f.value, f.max); err != nil {
			return nil, err
		}
		if !utf8.ValidString(f.value) {
			return nil, service.Errorf(service.ErrInvalid, "%s must be valid UTF-8", f.field)
		}
	}
	if m.SourceTerm == m.TargetTerm {
		return nil, service.Errorf(service.ErrInvalid, "targetTerm must differ from sourceTerm")
	}
	if m.Priority < -1000 || m.Priority > 1000 {
		return nil, service.Errorf(service.ErrInvalid, "priority must be between -1000 and 1000")
	}
	return m, nil
}

// List returns every mapping, enabled or not, highest priority first.
func (t *Terms) List(ctx context.Context) ([]service.TermMapping, error) {
	return t.read.TermMappings(ctx)
}

// Create adds a mapping.
func (t *Terms) Create(ctx context.Context, in TermInput) (*service.TermMapping, error) {
	var m *service.TermMapping
	err := t.audit.Do(ctx, service.AuditEvent{Action: service.AuditTermCreate, TargetType: service.TargetTermMapping, Detail: in.detail()},
		func(ctx context.Context, ev *service.AuditEvent) error {
			id, err := t.ids.NextID()
			if err != nil {
				return err
			}
			if m, err = in.mapping(id); err != nil {
				return err
			}
			ev.TargetID = id.String()
			return sourceConflict(t.store.CreateTermMapping(ctx, m), m.SourceTerm)
		})
	if err != nil {
		return nil, err
	}
	t.invalidate(ctx)
	return m, nil
}

// detail is the mapping in as the audit log shows it.
func (in TermInput) detail() string {
	return fmt.Sprintf("%s → %s enabled=%t", strings.TrimSpace(in.SourceTerm), strings.TrimSpace(in.TargetTerm), in.Enabled == nil || *in.Enabled)
}

// Update replaces a mapping; Enabled enables or disables it.
func (t *Terms) Update(ctx context.Context, id service.ID, in TermInput) (*service.TermMapping, error) {
	var m *service.TermMapping
	ev := service.AuditEvent{Action: service.AuditTermUpdate, TargetType: service.TargetTermMapping, TargetID: id.String(), Detail: in.detail()}
	err := t.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		var err error
		if m, err = in.mapping(id); err != nil {
			return err
		}
		old, err := t.store.TermMapping(ctx, id)
		if err != nil {
			return err
		}
		m.CreatedAt = old.CreatedAt
		return sourceConflict(t.store.UpdateTermMapping(ctx, m), m.SourceTerm)
	})
	if err != nil {
		return nil, err
	}
	t.invalidate(ctx)
	return m, nil
}

// Delete removes a mapping.
func (t *Terms) Delete(ctx context.Context, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditTermDelete, TargetType: service.TargetTermMapping, TargetID: id.String()}
	err := t.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		return t.store.DeleteTermMapping(ctx, id)
	})
	if err != nil {
		return err
	}
	t.invalidate(ctx)
	return nil
}

// sourceConflict explains the store's verdict that another enabled mapping
// already rewrites the source term.
func sourceConflict(err error, source string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, service.ErrConflict) {
		return service.Errorf(service.ErrConflict,
			"an enabled mapping for %q already exists (source terms are unique among enabled mappings, ignoring case); edit or disable it first", source)
	}
	return err
}
