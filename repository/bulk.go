package repository

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ragent-go/ragent/service"
)

// The methods here serve bulk loads (the scale benchmark): an HNSW index
// built once after a load is far cheaper than one maintained row by row
// during it, and the load reports what it cost in storage.

// DropVectorIndex removes the HNSW index of one embedding dimension;
// BuildVectorIndex (or EnsureVectorIndex) creates it again. Vector searches
// of that dimension scan the table meanwhile.
func (s *Store) DropVectorIndex(ctx context.Context, dim int) error {
	if dim < 1 || dim > 4000 {
		return service.Errorf(service.ErrInvalid, "embedding dimension %d out of range", dim)
	}
	return translate(s.conn(ctx).Exec("DROP INDEX IF EXISTS chunks_embedding_" + strconv.Itoa(dim)).Error)
}

// BuildVectorIndex is EnsureVectorIndex with maintenance_work_mem raised to
// memMB for the build: pgvector builds the graph in memory and falls back
// to a much slower on-disk build when it does not fit.
func (s *Store) BuildVectorIndex(ctx context.Context, dim, memMB int) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SET LOCAL maintenance_work_mem = '" + strconv.Itoa(max(64, memMB)) + "MB'").Error; err != nil {
			return translate(err)
		}
		return tx.EnsureVectorIndex(ctx, dim)
	})
}

// Vacuum vacuums and analyzes the database, as autovacuum would some time
// after a large load: fresh planner statistics, visibility maps for
// index-only scans, and the space of rows the load deleted (the keyword
// tail after compaction) returned.
//
// The keyword compactor may rebuild the tail's indexes (REINDEX
// CONCURRENTLY) at the same time; the two can deadlock, and Postgres then
// cancels one of them, here the VACUUM, which is simply run again.
func (s *Store) Vacuum(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := s.conn(ctx).Exec("VACUUM ANALYZE").Error
		var pgErr *pgconn.PgError
		if err == nil || attempt == 3 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" { // deadlock_detected
			return translate(err)
		}
	}
}

// StorageSizes returns the database's size in bytes and each table's total
// size (heap, TOAST and indexes) by table name.
func (s *Store) StorageSizes(ctx context.Context) (int64, map[string]int64, error) {
	var db int64
	if err := s.conn(ctx).Raw("SELECT pg_database_size(current_database())").Scan(&db).Error; err != nil {
		return 0, nil, translate(err)
	}
	var rows []struct {
		Name string
		Size int64
	}
	if err := s.conn(ctx).Raw(`SELECT c.relname AS name, pg_total_relation_size(c.oid) AS size
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')`).Scan(&rows).Error; err != nil {
		return 0, nil, translate(err)
	}
	tables := make(map[string]int64, len(rows))
	for _, r := range rows {
		tables[r.Name] = r.Size
	}
	return db, tables, nil
}

// ActiveWaits samples what this database's other active sessions are doing
// right now: each one's wait event ("CPU" when it waits on nothing) and the
// start of its statement. Sampled often during a run, it is a profile of
// where the database spends the run's time.
func (s *Store) ActiveWaits(ctx context.Context) ([]string, error) {
	var out []string
	err := s.conn(ctx).Raw(`SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' | ' ||
		left(regexp_replace(query, '\s+', ' ', 'g'), 70)
		FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`).
		Scan(&out).Error
	return out, translate(err)
}

// SettleKeywords compacts every knowledge base's keyword tail into blocks
// until none is left and rebuilds the emptied tail's indexes, as the
// background compactor does given time, so a bulk load is measured on the
// index's steady state. While another instance's compactor holds the lock
// it waits for it.
func (s *Store) SettleKeywords(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		more, err := s.CompactKeywords(ctx, 1)
		if err != nil {
			return err
		}
		if more {
			continue
		}
		var left bool
		if err := s.conn(ctx).Raw("SELECT EXISTS (SELECT 1 FROM keyword_tail) OR EXISTS (SELECT 1 FROM keyword_dead)").
			Scan(&left).Error; err != nil {
			return translate(err)
		}
		if !left {
			return s.ShrinkKeywordTail(ctx, tailShrinkBytes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
