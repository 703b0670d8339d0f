package repository

import (
	"context"
	"io/fs"
	"sync"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/migrations"
)

func openTest(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func migrationCount(t *testing.T) int {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	return len(names)
}

func TestMigrateTwiceIsIdempotent(t *testing.T) {
	s := openTest(t, testenv.FreshDatabase(t))
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate #%d: %v", i+1, err)
		}
	}
	var n int
	if err := s.db.Raw("SELECT count(*) FROM schema_migrations").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if want := migrationCount(t); n != want {
		t.Fatalf("schema_migrations has %d rows, want %d", n, want)
	}
	var ext string
	if err := s.db.Raw("SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&ext).Error; err != nil || ext == "" {
		t.Fatalf("vector extension missing: %q %v", ext, err)
	}
}

// Several instances starting at once: each has its own pool (as a separate
// process would); the advisory lock lets exactly one apply each migration and
// runs the bootstrap callbacks one at a time.
func TestMigrateConcurrently(t *testing.T) {
	url := testenv.FreshDatabase(t)
	const instances = 5
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		inside  int
		maxSeen int
		errs    = make(chan error, instances)
	)
	for i := 0; i < instances; i++ {
		s := openTest(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.WithStartupLock(context.Background(), func(ctx context.Context) error {
				mu.Lock()
				inside++
				maxSeen = max(maxSeen, inside)
				mu.Unlock()
				_, err := s.SettingOrCreate(ctx, "probe", "x")
				mu.Lock()
				inside--
				mu.Unlock()
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if maxSeen != 1 {
		t.Fatalf("%d bootstrap callbacks ran at once, want 1", maxSeen)
	}
	s := openTest(t, url)
	var n int
	if err := s.db.Raw("SELECT count(*) FROM schema_migrations").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if want := migrationCount(t); n != want {
		t.Fatalf("schema_migrations has %d rows, want %d", n, want)
	}
}

func TestSettingOrCreateKeepsFirstValue(t *testing.T) {
	s := openTest(t, testenv.FreshDatabase(t))
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := s.SettingOrCreate(ctx, "k", "first")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.SettingOrCreate(ctx, "k", "second")
	if err != nil {
		t.Fatal(err)
	}
	if a != "first" || b != "first" {
		t.Fatalf("got %q then %q, want first twice", a, b)
	}
}
