package repository

import (
	"context"
	"time"

	"github.com/ragent-go/ragent/service"
)

type apiKeyRow struct {
	ID     int64
	UserID int64
	// Joined from users, never written.
	Username      string `gorm:"->"`
	OwnerRole     string `gorm:"->"`
	OwnerDisabled bool   `gorm:"->"`
	Name          string
	Prefix        string
	KeyHash       []byte
	Scopes        jsonList[string]
	KbIDs         *jsonList[int64] `gorm:"column:kb_ids"` // nil: every knowledge base
	ExpiresAt     *time.Time
	LastUsedAt    *time.Time
	RevokedAt     *time.Time
	CreatedAt     time.Time
	Kind          string
	Origins       *jsonList[string] // widget keys only
	OriginRate    *int
	VisitorRate   *int
}

func (apiKeyRow) TableName() string { return "api_keys" }

func (r apiKeyRow) key() *service.APIKey {
	k := &service.APIKey{
		ID: service.ID(r.ID), UserID: service.ID(r.UserID), Username: r.Username, Name: r.Name, Prefix: r.Prefix,
		Scopes: make([]service.Scope, len(r.Scopes)), ExpiresAt: r.ExpiresAt, LastUsedAt: r.LastUsedAt,
		CreatedAt: r.CreatedAt, Hash: r.KeyHash, Kind: service.KeyKind(r.Kind),
	}
	if k.Kind == "" {
		k.Kind = service.KeyKindAPI
	}
	if k.Kind == service.KeyKindWidget {
		w := &service.WidgetSettings{}
		if r.Origins != nil {
			w.Origins = []string(*r.Origins)
		}
		if r.OriginRate != nil {
			w.OriginRate = *r.OriginRate
		}
		if r.VisitorRate != nil {
			w.VisitorRate = *r.VisitorRate
		}
		k.Widget = w
	}
	for i, s := range r.Scopes {
		k.Scopes[i] = service.Scope(s)
	}
	if r.KbIDs != nil {
		k.KnowledgeBaseIDs = make([]service.ID, len(*r.KbIDs))
		for i, id := range *r.KbIDs {
			k.KnowledgeBaseIDs[i] = service.ID(id)
		}
	}
	return k
}

// CreateAPIKey inserts k (its hash, never the key) unless its owner already
// has max live (unrevoked) keys: then service.ErrConflict. The owner's user
// row is locked while the keys are counted, so parallel creates are counted
// one after the other and cannot pass the cap together.
func (s *Store) CreateAPIKey(ctx context.Context, k *service.APIKey, max int) error {
	row := apiKeyRow{
		ID: int64(k.ID), UserID: int64(k.UserID), Name: k.Name, Prefix: k.Prefix, KeyHash: k.Hash,
		Scopes: make(jsonList[string], len(k.Scopes)), ExpiresAt: k.ExpiresAt, Kind: string(k.Kind),
	}
	if row.Kind == "" {
		row.Kind = string(service.KeyKindAPI)
	}
	if w := k.Widget; w != nil {
		origins := jsonList[string](w.Origins)
		row.Origins, row.OriginRate, row.VisitorRate = &origins, &w.OriginRate, &w.VisitorRate
	}
	for i, sc := range k.Scopes {
		row.Scopes[i] = string(sc)
	}
	if k.KnowledgeBaseIDs != nil {
		ids := make(jsonList[int64], len(k.KnowledgeBaseIDs))
		for i, id := range k.KnowledgeBaseIDs {
			ids[i] = int64(id)
		}
		row.KbIDs = &ids
	}
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := found(tx.db.Exec(`SELECT 1 FROM users WHERE id = ? FOR UPDATE`, row.UserID)); err != nil {
			return err
		}
		var live int64
		if err := tx.db.Table("api_keys").Where("user_id = ? AND revoked_at IS NULL", row.UserID).Count(&live).Error; err != nil {
			return translate(err)
		}
		if live >= int64(max) {
			return service.Errorf(service.ErrConflict, "at most %d API keys per user; revoke one first", max)
		}
		return translate(tx.db.Omit("Username", "OwnerRole", "OwnerDisabled").Create(&row).Error)
	})
	if err != nil {
		return err
	}
	k.CreatedAt = row.CreatedAt
	return nil
}

const apiKeyColumns = `k.id, k.user_id, u.username, k.name, k.prefix, k.key_hash, k.scopes, k.kb_ids,
	k.expires_at, k.last_used_at, k.revoked_at, k.created_at, k.kind, k.origins, k.origin_rate, k.visitor_rate`

// APIKeyByHash returns the live key with this SHA-256 and its owner, in one
// indexed lookup: revoked keys and keys of deleted users are
// service.ErrNotFound. Expiry and the owner's disabled flag are the
// caller's to judge.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (*service.APIKey, *service.User, error) {
	var rows []apiKeyRow
	err := s.conn(ctx).Raw(`SELECT `+apiKeyColumns+`, u.role AS owner_role, u.disabled AS owner_disabled
		FROM api_keys k JOIN users u ON u.id = k.user_id AND u.deleted_at IS NULL
		WHERE k.key_hash = ? AND k.revoked_at IS NULL`, hash).Scan(&rows).Error
	if err != nil {
		return nil, nil, translate(err)
	}
	if len(rows) == 0 {
		return nil, nil, service.ErrNotFound
	}
	r := rows[0]
	u := &service.User{ID: service.ID(r.UserID), Username: r.Username, Role: service.Role(r.OwnerRole), Disabled: r.OwnerDisabled}
	return r.key(), u, nil
}

// APIKeys returns up to limit live keys (unrevoked, of live users) with ids
// greater than after, in id order: userID's, or everyone's when userID is 0.
func (s *Store) APIKeys(ctx context.Context, userID, after service.ID, limit int) ([]*service.APIKey, error) {
	q := s.conn(ctx).Table("api_keys k").Select(apiKeyColumns).
		Joins("JOIN users u ON u.id = k.user_id AND u.deleted_at IS NULL").
		Where("k.revoked_at IS NULL AND k.id > ?", int64(after))
	if userID != 0 {
		q = q.Where("k.user_id = ?", int64(userID))
	}
	var rows []apiKeyRow
	if err := q.Order("k.id").Limit(limit).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return convert(rows, apiKeyRow.key), nil
}

// APIKeyByID returns a live (unrevoked) key.
func (s *Store) APIKeyByID(ctx context.Context, id service.ID) (*service.APIKey, error) {
	var rows []apiKeyRow
	err := s.conn(ctx).Raw(`SELECT `+apiKeyColumns+` FROM api_keys k JOIN users u ON u.id = k.user_id
		WHERE k.id = ? AND k.revoked_at IS NULL`, int64(id)).Scan(&rows).Error
	if err != nil {
		return nil, translate(err)
	}
	if len(rows) == 0 {
		return nil, service.ErrNotFound
	}
	return rows[0].key(), nil
}

// RevokeAPIKey marks a live key revoked; an unknown or already revoked one
// is service.ErrNotFound.
func (s *Store) RevokeAPIKey(ctx context.Context, id service.ID) error {
	return found(s.conn(ctx).Exec(`UPDATE api_keys SET revoked_at = now() WHERE id = ? AND revoked_at IS NULL`, int64(id)))
}

// TouchAPIKey records a use of the key, unless one was recorded since
// notBefore (so busy keys are not written on every request).
func (s *Store) TouchAPIKey(ctx context.Context, id service.ID, at, notBefore time.Time) error {
	return translate(s.conn(ctx).Exec(`UPDATE api_keys SET last_used_at = ?
		WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)`, at, int64(id), notBefore).Error)
}
