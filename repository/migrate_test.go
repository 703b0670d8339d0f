package repository

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/migrations"
)

func openTest(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Config{MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// migratedStore opens a fresh database of its own, migrated.
func migratedStore(t *testing.T) *Store {
	t.Helper()
	s := openTest(t, testenv.FreshDatabase(t))
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// fatalOn returns a check that fails t on an error.
func fatalOn(t *testing.T) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
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
		wg.Go(func() {
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
		})
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
	s := migratedStore(t)
	ctx := context.Background()
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

// The app's role owns its databases but is not a superuser (see
// scripts/services.sh): migrations must not need more, and the role the
// tests use, which is the one the app uses, must not have more.
func TestMigrateAsNonSuperuser(t *testing.T) {
	s := openTest(t, testenv.FreshDatabase(t))
	ctx := context.Background()
	var role struct {
		Name  string
		Super bool
		Owner string
	}
	if err := s.db.Raw(`SELECT current_user AS name, r.rolsuper AS super, pg_get_userbyid(d.datdba) AS owner
		FROM pg_roles r, pg_database d WHERE r.rolname = current_user AND d.datname = current_database()`).
		Scan(&role).Error; err != nil {
		t.Fatal(err)
	}
	if role.Super {
		t.Fatalf("the database role %q is a superuser; the app must connect as a non-superuser owner of its database (run scripts/services.sh start)", role.Name)
	}
	if role.Owner != role.Name {
		t.Fatalf("database owned by %q, want the connecting role %q", role.Owner, role.Name)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate as %s: %v", role.Name, err)
	}
	var ext string
	if err := s.db.Raw("SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&ext).Error; err != nil || ext == "" {
		t.Fatalf("vector extension missing: %q %v", ext, err)
	}
}

// Without the vector extension a non-superuser cannot create it (pgvector
// is not a trusted extension): the migration says what to do instead of
// only "permission denied".
func TestMigrateWithoutVectorExplains(t *testing.T) {
	s := openTest(t, testenv.FreshBareDatabase(t))
	var super bool
	if err := s.db.Raw("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super).Error; err != nil {
		t.Fatal(err)
	}
	if super {
		t.Fatal("the test role is a superuser, which creates the extension itself; the app's role must not be one (see TestMigrateAsNonSuperuser)")
	}
	err := s.Migrate(context.Background())
	if err == nil {
		t.Fatal("migrate succeeded without the vector extension and without superuser rights")
	}
	if !strings.Contains(err.Error(), "CREATE EXTENSION vector") || !strings.Contains(err.Error(), "superuser") {
		t.Fatalf("error does not say how to install the extension: %v", err)
	}
}
