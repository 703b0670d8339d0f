package repository

import (
	"context"
	"errors"

	"github.com/ragent-go/ragent/service"
)

// Setting returns the value stored under key, or service.ErrNotFound.
func (s *Store) Setting(ctx context.Context, key string) (string, error) {
	var values []string
	if err := s.conn(ctx).Raw("SELECT value FROM settings WHERE key = ?", key).Scan(&values).Error; err != nil {
		return "", translate(err)
	}
	if len(values) == 0 {
		return "", service.ErrNotFound
	}
	return values[0], nil
}

// SettingOrCreate returns the value under key, storing value first if the key
// is absent. Every instance gets the same value, whoever stored it.
func (s *Store) SettingOrCreate(ctx context.Context, key, value string) (string, error) {
	err := s.conn(ctx).Exec(
		"INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", key, value).Error
	if err != nil {
		return "", translate(err)
	}
	v, err := s.Setting(ctx, key)
	if errors.Is(err, service.ErrNotFound) {
		return "", errors.New("setting vanished after insert")
	}
	return v, err
}
