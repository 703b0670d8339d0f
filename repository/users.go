package repository

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/ragent-go/ragent/service"
)

type userRow struct {
	ID           int64
	Username     string
	PasswordHash string
	Role         string
	Disabled     bool
	TokenVersion int64
	OIDCIssuer   string `gorm:"column:oidc_issuer"`
	OIDCSubject  string `gorm:"column:oidc_subject"`
	CreatedAt    time.Time
	UpdatedAt    time.Time
	DeletedAt    gorm.DeletedAt
}

func (userRow) TableName() string { return "users" }

func (r userRow) user() *service.User {
	return &service.User{
		ID: service.ID(r.ID), Username: r.Username, PasswordHash: r.PasswordHash,
		Role: service.Role(r.Role), Disabled: r.Disabled, TokenVersion: r.TokenVersion, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		OIDCIssuer: r.OIDCIssuer, OIDCSubject: r.OIDCSubject, SSO: r.OIDCSubject != "",
	}
}

// CreateUser inserts u; a taken username is service.ErrConflict.
func (s *Store) CreateUser(ctx context.Context, u *service.User) error {
	row := userRow{
		ID: int64(u.ID), Username: u.Username, PasswordHash: u.PasswordHash,
		Role: string(u.Role), Disabled: u.Disabled, OIDCIssuer: u.OIDCIssuer, OIDCSubject: u.OIDCSubject,
	}
	if err := s.conn(ctx).Create(&row).Error; err != nil {
		return translate(err)
	}
	u.CreatedAt, u.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

// UserByID returns a live user.
func (s *Store) UserByID(ctx context.Context, id service.ID) (*service.User, error) {
	return take(s.conn(ctx), userRow.user, int64(id))
}

// UserByUsername returns a live user by case-insensitive username.
func (s *Store) UserByUsername(ctx context.Context, username string) (*service.User, error) {
	return take(s.conn(ctx).Where("lower(username) = lower(?)", username), userRow.user)
}

// ListUsers returns up to limit live users with ids greater than after, in id order.
func (s *Store) ListUsers(ctx context.Context, after service.ID, limit int) ([]*service.User, error) {
	return find(s.conn(ctx).Where("id > ?", int64(after)).Order("id").Limit(limit), userRow.user)
}

// CountUsers counts live users.
func (s *Store) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	err := s.conn(ctx).Model(&userRow{}).Count(&n).Error
	return n, translate(err)
}

// UpdateUser stores the role, disabled flag and password hash of u. With
// endSessions it also increments the token version in the same statement (so
// concurrent bumps are never lost) and sets u.TokenVersion to the new value.
func (s *Store) UpdateUser(ctx context.Context, u *service.User, endSessions bool) error {
	bump := 0
	if endSessions {
		bump = 1
	}
	var versions []int64
	err := s.conn(ctx).Raw(`UPDATE users SET role = ?, disabled = ?, password_hash = ?, token_version = token_version + ?, updated_at = now()
		WHERE id = ? AND deleted_at IS NULL RETURNING token_version`,
		string(u.Role), u.Disabled, u.PasswordHash, bump, int64(u.ID)).Scan(&versions).Error
	if err != nil {
		return translate(err)
	}
	if len(versions) == 0 {
		return service.ErrNotFound
	}
	u.TokenVersion = versions[0]
	return nil
}

// SetPassword stores a new password hash of a live, enabled user and
// increments their token version, returning it. Only these two columns are
// written, so a disable or role change made meanwhile stays.
func (s *Store) SetPassword(ctx context.Context, id service.ID, passwordHash string) (int64, error) {
	return s.bumpTokenVersion(ctx, `UPDATE users SET password_hash = ?, token_version = token_version + 1, updated_at = now()
		WHERE id = ? AND deleted_at IS NULL AND NOT disabled RETURNING token_version`, passwordHash, int64(id))
}

// EndSessions increments the token version of a live user, which ends every
// token issued before, and returns the new version.
func (s *Store) EndSessions(ctx context.Context, id service.ID) (int64, error) {
	return s.bumpTokenVersion(ctx, `UPDATE users SET token_version = token_version + 1, updated_at = now()
		WHERE id = ? AND deleted_at IS NULL RETURNING token_version`, int64(id))
}

func (s *Store) bumpTokenVersion(ctx context.Context, sql string, args ...any) (int64, error) {
	var versions []int64
	if err := s.conn(ctx).Raw(sql, args...).Scan(&versions).Error; err != nil {
		return 0, translate(err)
	}
	if len(versions) == 0 {
		return 0, service.ErrNotFound
	}
	return versions[0], nil
}

// DeleteUser soft-deletes a user; their conversations stay for the record.
func (s *Store) DeleteUser(ctx context.Context, id service.ID) error {
	return found(s.conn(ctx).Delete(&userRow{}, int64(id)))
}

// SessionUser returns the live user id and whether tokenID was logged out,
// in one query: the read every authenticated request makes.
func (s *Store) SessionUser(ctx context.Context, id service.ID, tokenID string) (*service.User, bool, error) {
	var (
		r       userRow
		revoked bool
	)
	err := s.conn(ctx).Raw(`SELECT u.id, u.username, u.password_hash, u.role, u.disabled, u.token_version, u.oidc_issuer, u.oidc_subject, u.created_at, u.updated_at,
			EXISTS (SELECT 1 FROM revoked_tokens t WHERE t.token_id = ?)
		FROM users u WHERE u.id = ? AND u.deleted_at IS NULL`, tokenID, int64(id)).Row().
		Scan(&r.ID, &r.Username, &r.PasswordHash, &r.Role, &r.Disabled, &r.TokenVersion, &r.OIDCIssuer, &r.OIDCSubject, &r.CreatedAt, &r.UpdatedAt, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, service.ErrNotFound
	}
	if err != nil {
		return nil, false, translate(err)
	}
	return r.user(), revoked, nil
}

// RevokeToken records tokenID as logged out until expires.
func (s *Store) RevokeToken(ctx context.Context, tokenID string, expires time.Time) error {
	return translate(s.conn(ctx).Exec(`INSERT INTO revoked_tokens (token_id, expires_at) VALUES (?, ?)
		ON CONFLICT (token_id) DO NOTHING`, tokenID, expires).Error)
}

// PruneRevokedTokens deletes revocations of tokens that expired before t.
func (s *Store) PruneRevokedTokens(ctx context.Context, before time.Time) (int64, error) {
	res := s.conn(ctx).Exec(`DELETE FROM revoked_tokens WHERE expires_at < ?`, before)
	return res.RowsAffected, translate(res.Error)
}
