package repository

import (
	"context"
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
	CreatedAt    time.Time
	UpdatedAt    time.Time
	DeletedAt    gorm.DeletedAt
}

func (userRow) TableName() string { return "users" }

func (r userRow) user() *service.User {
	return &service.User{
		ID: service.ID(r.ID), Username: r.Username, PasswordHash: r.PasswordHash,
		Role: service.Role(r.Role), Disabled: r.Disabled, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// CreateUser inserts u; a taken username is service.ErrConflict.
func (s *Store) CreateUser(ctx context.Context, u *service.User) error {
	row := userRow{
		ID: int64(u.ID), Username: u.Username, PasswordHash: u.PasswordHash,
		Role: string(u.Role), Disabled: u.Disabled,
	}
	if err := s.conn(ctx).Create(&row).Error; err != nil {
		return translate(err)
	}
	u.CreatedAt, u.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

// UserByID returns a live user.
func (s *Store) UserByID(ctx context.Context, id service.ID) (*service.User, error) {
	var row userRow
	if err := s.conn(ctx).Take(&row, int64(id)).Error; err != nil {
		return nil, translate(err)
	}
	return row.user(), nil
}

// UserByUsername returns a live user by case-insensitive username.
func (s *Store) UserByUsername(ctx context.Context, username string) (*service.User, error) {
	var row userRow
	if err := s.conn(ctx).Where("lower(username) = lower(?)", username).Take(&row).Error; err != nil {
		return nil, translate(err)
	}
	return row.user(), nil
}

// ListUsers returns up to limit live users with ids greater than after, in id order.
func (s *Store) ListUsers(ctx context.Context, after service.ID, limit int) ([]*service.User, error) {
	var rows []userRow
	if err := s.conn(ctx).Where("id > ?", int64(after)).Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]*service.User, len(rows))
	for i, r := range rows {
		out[i] = r.user()
	}
	return out, nil
}

// CountUsers counts live users.
func (s *Store) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	err := s.conn(ctx).Model(&userRow{}).Count(&n).Error
	return n, translate(err)
}

// UpdateUser stores the role, disabled flag and password hash of u.
func (s *Store) UpdateUser(ctx context.Context, u *service.User) error {
	res := s.conn(ctx).Model(&userRow{ID: int64(u.ID)}).Updates(map[string]any{
		"role": string(u.Role), "disabled": u.Disabled, "password_hash": u.PasswordHash, "updated_at": time.Now().UTC(),
	})
	if res.Error != nil {
		return translate(res.Error)
	}
	if res.RowsAffected == 0 {
		return service.ErrNotFound
	}
	return nil
}

// DeleteUser soft-deletes a user; their conversations stay for the record.
func (s *Store) DeleteUser(ctx context.Context, id service.ID) error {
	res := s.conn(ctx).Delete(&userRow{}, int64(id))
	if res.Error != nil {
		return translate(res.Error)
	}
	if res.RowsAffected == 0 {
		return service.ErrNotFound
	}
	return nil
}
