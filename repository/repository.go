// Package repository is ragent's Postgres adapter: GORM with pgvector (and
// pgx itself where round trips matter: the keyword search pipelines its
// reads), and the only place in the code base that speaks SQL.
//
// It translates driver errors into the service package's sentinels once
// (record not found → service.ErrNotFound, unique violation →
// service.ErrConflict) so no caller ever sees a driver error.
package repository

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ragent-go/ragent/service"
)

// Store is the Postgres-backed store of every table. Its methods are grouped
// by table in the files of this package.
type Store struct {
	db  *gorm.DB
	log *slog.Logger
	// search, when set, mirrors chunk changes to an external search engine
	// through the search-index outbox message (see UseSearchIndex).
	search *searchIndex
	// relayLease, when set, replaces the relays' claim lease (tests).
	relayLease time.Duration
}

// Config tunes the connection pool; zero values take the defaults.
type Config struct {
	MaxOpenConns int
	MaxIdleConns int
	Logger       *slog.Logger // nil discards
}

// Open connects to Postgres and checks the connection.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.MaxOpenConns = cmp.Or(cfg.MaxOpenConns, 20)
	cfg.MaxIdleConns = cmp.Or(cfg.MaxIdleConns, cfg.MaxOpenConns)
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: url}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		PrepareStmt:            false,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	sqlDB.SetMaxOpenConns(cfg.MaxOpenConns)
	sqlDB.SetMaxIdleConns(cfg.MaxIdleConns)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{db: db, log: cfg.Logger}
	if err := s.Ping(ctx); err != nil {
		sqlDB.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// Ping checks that Postgres answers; readiness uses it.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("%w: postgres: %v", service.ErrUnavailable, err)
	}
	return nil
}

// WithinTx runs fn with a Store bound to one transaction, committing when fn
// returns nil and rolling back otherwise. Inside a transaction of InTx
// (carried by ctx) it is a savepoint of that transaction.
func (s *Store) WithinTx(ctx context.Context, fn func(tx *Store) error) error {
	err := s.conn(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(&Store{db: tx, log: s.log, search: s.search})
	})
	return translate(err)
}

// txKey carries InTx's transaction in a context.
type txKey struct{}

// InTx runs fn in one transaction that every Store method called with the
// context fn receives joins, committing when fn returns nil and rolling back
// otherwise. It lets a use case make several store calls (a change and its
// audit event) atomic without knowing about SQL; it implements
// service.Transactor.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context) error) error {
	err := s.conn(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
	return translate(err)
}

// conn is the connection a statement runs on: InTx's transaction when ctx
// carries one, else s's own (the pool, or WithinTx's transaction).
func (s *Store) conn(ctx context.Context) *gorm.DB {
	if tx, ok := ctx.Value(txKey{}).(*gorm.DB); ok {
		return tx.WithContext(ctx)
	}
	return s.db.WithContext(ctx)
}

// translate turns driver errors into service sentinels.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w", service.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %s", service.ErrConflict, pgErr.ConstraintName)
		case "23503": // foreign_key_violation
			return fmt.Errorf("%w: %s references a missing row", service.ErrInvalid, pgErr.ConstraintName)
		case "57P01", "57P02", "57P03", "08000", "08003", "08006":
			return fmt.Errorf("%w: postgres: %v", service.ErrUnavailable, err)
		case "54000": // program_limit_exceeded: e.g. a value too big for a btree index row
			return dataError{pgErr}
		}
		if strings.HasPrefix(pgErr.Code, "22") { // data_exception: bad encoding, out-of-range value, string too long
			return dataError{pgErr}
		}
		return err
	}
	if isConnectionError(err) {
		return fmt.Errorf("%w: postgres: %v", service.ErrUnavailable, err)
	}
	return err
}

// dataError is Postgres refusing the data of a statement: invalid input
// (400 at the API) that no retry can fix, so it is also service.ErrPermanent.
type dataError struct{ pg *pgconn.PgError }

func (e dataError) Error() string {
	return fmt.Sprintf("postgres refused the data: %s (SQLSTATE %s)", e.pg.Message, e.pg.Code)
}

func (e dataError) Unwrap() []error { return []error{service.ErrInvalid, service.ErrPermanent, e.pg} }

// isConnectionError reports whether err means Postgres could not be reached
// or the connection broke, as opposed to a failed statement.
func isConnectionError(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// find reads the rows q selects and converts each to the service's value.
func find[R, T any](q *gorm.DB, conv func(R) T) ([]T, error) {
	var rows []R
	if err := q.Find(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return convert(rows, conv), nil
}

// convert maps rows read from a table to the service's values.
func convert[R, T any](rows []R, conv func(R) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = conv(r)
	}
	return out
}

// found is the error of a statement that must change a row: the translated
// error, or service.ErrNotFound when no row matched.
func found(res *gorm.DB) error {
	if res.Error != nil {
		return translate(res.Error)
	}
	if res.RowsAffected == 0 {
		return service.ErrNotFound
	}
	return nil
}

// take reads the one row q selects (with Take's conditions, such as a
// primary key) and converts it to the service's value.
func take[R, T any](q *gorm.DB, conv func(R) T, conds ...any) (T, error) {
	var row R
	if err := q.Take(&row, conds...).Error; err != nil {
		var zero T
		return zero, translate(err)
	}
	return conv(row), nil
}

// limitTo limits q to limit rows; limit <= 0 reads them all.
func limitTo(q *gorm.DB, limit int) *gorm.DB {
	if limit > 0 {
		return q.Limit(limit)
	}
	return q
}

// whereSet narrows q by cond when v is set (not its type's zero value): a
// filter left empty selects everything.
func whereSet[T comparable](q *gorm.DB, cond string, v T) *gorm.DB {
	var zero T
	if v == zero {
		return q
	}
	return q.Where(cond, v)
}
