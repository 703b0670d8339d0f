package repository

import (
	"context"
	"time"

	"github.com/ragent-go/ragent/service"
)

type auditRow struct {
	ID          int64
	At          time.Time
	ActorUserID *int64
	ActorKeyID  *int64
	ActorName   string
	Action      string
	TargetType  string
	TargetID    string
	Result      string
	Detail      string
	RequestID   string
	IP          string
}

func (auditRow) TableName() string { return "audit_events" }

func nullableID(id service.ID) *int64 {
	if id == 0 {
		return nil
	}
	v := int64(id)
	return &v
}

func (r auditRow) event() *service.AuditEvent {
	e := &service.AuditEvent{
		ID: service.ID(r.ID), At: r.At, ActorName: r.ActorName, Action: r.Action,
		TargetType: r.TargetType, TargetID: r.TargetID, Result: service.AuditResult(r.Result),
		Detail: r.Detail, RequestID: r.RequestID, IP: r.IP,
	}
	if r.ActorUserID != nil {
		e.ActorUserID = service.ID(*r.ActorUserID)
	}
	if r.ActorKeyID != nil {
		e.ActorKeyID = service.ID(*r.ActorKeyID)
	}
	return e
}

// AppendAudit inserts an audit event, in InTx's transaction when ctx
// carries one. The table refuses updates and deletes (migration 0006).
func (s *Store) AppendAudit(ctx context.Context, e *service.AuditEvent) error {
	row := auditRow{
		ID: int64(e.ID), At: e.At, ActorUserID: nullableID(e.ActorUserID), ActorKeyID: nullableID(e.ActorKeyID),
		ActorName: e.ActorName, Action: e.Action, TargetType: e.TargetType, TargetID: e.TargetID,
		Result: string(e.Result), Detail: e.Detail, RequestID: e.RequestID, IP: e.IP,
	}
	return translate(s.conn(ctx).Create(&row).Error)
}

// AuditEvents returns the events f selects, newest first.
func (s *Store) AuditEvents(ctx context.Context, f service.AuditFilter) ([]*service.AuditEvent, error) {
	q := s.conn(ctx).Model(&auditRow{})
	q = whereSet(q, "actor_user_id = ?", int64(f.ActorUserID))
	q = whereSet(q, "action = ?", f.Action)
	q = whereSet(q, "target_id = ?", f.TargetID)
	q = whereSet(q, "result = ?", string(f.Result))
	if !f.Since.IsZero() {
		q = q.Where("at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		q = q.Where("at < ?", f.Until)
	}
	q = whereSet(q, "id < ?", int64(f.Before))
	return find(q.Order("id DESC").Limit(f.Limit), auditRow.event)
}

// PruneFailedLogins deletes up to limit failed sign-in events recorded
// before t, oldest first, and returns how many it deleted. Migration 0016's
// trigger allows deleting these alone, and only once a day old.
func (s *Store) PruneFailedLogins(ctx context.Context, before time.Time, limit int) (int64, error) {
	res := s.conn(ctx).Exec(`DELETE FROM audit_events WHERE id IN (
		SELECT id FROM audit_events WHERE at < ? AND action = ? AND result <> ? ORDER BY at LIMIT ?)`,
		before, service.AuditLogin, string(service.AuditSuccess), limit)
	return res.RowsAffected, translate(res.Error)
}
