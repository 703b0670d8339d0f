package repository

import (
	"context"
	"time"

	"github.com/ragent-go/ragent/service"
)

type termMappingRow struct {
	ID         int64
	SourceTerm string
	TargetTerm string
	Priority   int
	Enabled    bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

func (termMappingRow) TableName() string { return "term_mappings" }

func (r termMappingRow) mapping() service.TermMapping {
	return service.TermMapping{
		ID: service.ID(r.ID), SourceTerm: r.SourceTerm, TargetTerm: r.TargetTerm,
		Priority: r.Priority, Enabled: r.Enabled, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// TermMappings returns every mapping, enabled or not, highest priority first.
func (s *Store) TermMappings(ctx context.Context) ([]service.TermMapping, error) {
	return find(s.conn(ctx).Order("priority DESC, source_term, id"), termMappingRow.mapping)
}

// TermMapping returns one mapping.
func (s *Store) TermMapping(ctx context.Context, id service.ID) (*service.TermMapping, error) {
	var row termMappingRow
	if err := s.conn(ctx).Take(&row, int64(id)).Error; err != nil {
		return nil, translate(err)
	}
	m := row.mapping()
	return &m, nil
}

// CreateTermMapping inserts m; an enabled mapping whose source term is
// already enabled (ignoring case) is service.ErrConflict.
func (s *Store) CreateTermMapping(ctx context.Context, m *service.TermMapping) error {
	row := termMappingRow{ID: int64(m.ID), SourceTerm: m.SourceTerm, TargetTerm: m.TargetTerm,
		Priority: m.Priority, Enabled: m.Enabled}
	if err := s.conn(ctx).Create(&row).Error; err != nil {
		return translate(err)
	}
	m.CreatedAt, m.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

// UpdateTermMapping stores every editable field of m.
func (s *Store) UpdateTermMapping(ctx context.Context, m *service.TermMapping) error {
	now := time.Now().UTC()
	res := s.conn(ctx).Model(&termMappingRow{ID: int64(m.ID)}).Updates(map[string]any{
		"source_term": m.SourceTerm, "target_term": m.TargetTerm, "priority": m.Priority,
		"enabled": m.Enabled, "updated_at": now,
	})
	if err := found(res); err != nil {
		return err
	}
	m.UpdatedAt = now
	return nil
}

// DeleteTermMapping removes a mapping.
func (s *Store) DeleteTermMapping(ctx context.Context, id service.ID) error {
	return found(s.conn(ctx).Delete(&termMappingRow{}, int64(id)))
}
