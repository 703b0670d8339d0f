package repository

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/ragent-go/ragent/migrations"
)

// startupLockKey is the Postgres advisory lock that serialises migrations and
// first-start bootstrap across every instance starting at once.
const startupLockKey = 0x72616765 // "rage"

// WithStartupLock runs fn while holding the startup advisory lock, after
// applying pending migrations. Instances that start together queue on the
// lock, so exactly one of them migrates and bootstraps and the others find
// the work done.
func (s *Store) WithStartupLock(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.conn(ctx).Connection(func(conn *gorm.DB) error {
		if err := conn.Exec("SELECT pg_advisory_lock(?)", startupLockKey).Error; err != nil {
			return translate(err)
		}
		defer conn.Exec("SELECT pg_advisory_unlock(?)", startupLockKey)
		if err := migrate(conn); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		return fn(ctx)
	})
}

// Migrate applies pending migrations under the startup lock.
func (s *Store) Migrate(ctx context.Context) error { return s.WithStartupLock(ctx, nil) }

// migrate applies each embedded *.sql file not yet recorded in
// schema_migrations, each in its own transaction.
func migrate(conn *gorm.DB) error {
	if err := conn.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`).Error; err != nil {
		return fmt.Errorf("migrate: %w", translate(err))
	}
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var applied []string
	if err := conn.Raw("SELECT version FROM schema_migrations").Scan(&applied).Error; err != nil {
		return fmt.Errorf("migrate: %w", translate(err))
	}
	done := make(map[string]bool, len(applied))
	for _, v := range applied {
		done[v] = true
	}
	for _, name := range names {
		version := strings.TrimSuffix(name, ".sql")
		if done[version] {
			continue
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return err
		}
		err = conn.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(string(body)).Error; err != nil {
				return err
			}
			return tx.Exec("INSERT INTO schema_migrations (version) VALUES (?)", version).Error
		})
		if err != nil {
			if hint := privilegeHint(err); hint != "" {
				return fmt.Errorf("migrate %s: %w (%s)", name, translate(err), hint)
			}
			return fmt.Errorf("migrate %s: %w", name, translate(err))
		}
	}
	return nil
}

// privilegeHint explains a migration refused for lack of privilege. The app's
// role is deliberately not a superuser, and pgvector is not a trusted
// extension: a superuser must create it once, in the database or in template1
// so every new database has it (scripts/services.sh does the latter).
func privilegeHint(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
		return ""
	}
	if strings.Contains(pgErr.Message, "extension") {
		return "a superuser must run CREATE EXTENSION vector in this database, or in template1 before the database is created; " +
			"the app's role needs no superuser rights"
	}
	return "the app's role must own its database"
}
