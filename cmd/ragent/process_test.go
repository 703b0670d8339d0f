package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestHelperProcess is not a test: it runs the ragent command in a child
// process started by the tests below (the test binary re-executes itself,
// so no separate build is needed).
func TestHelperProcess(t *testing.T) {
	args := os.Getenv("RAGENT_HELPER_ARGS")
	if args == "" {
		t.Skip("runs only as a child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, strings.Fields(args), os.Getenv, os.Stdout, os.Stderr); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// runProcess runs `ragent <args>` in a child process.
func runProcess(t *testing.T, args string, env ...string) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), append(env, "RAGENT_HELPER_ARGS="+args)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Several processes migrate one empty database at the same moment; the
// advisory lock lets one apply each migration, and all of them succeed.
func TestMigrateFromSeveralProcesses(t *testing.T) {
	url := testenv.FreshDatabase(t)
	const procs = 4
	var wg sync.WaitGroup
	errs := make([]error, procs)
	outs := make([]string, procs)
	for i := 0; i < procs; i++ {
		wg.Go(func() {
			outs[i], errs[i] = runProcess(t, "migrate", "RAGENT_DATABASE_URL="+url, "RAGENT_LOG_LEVEL=warn")
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, outs[i])
		}
	}
	ctx := context.Background()
	conn := connectDB(t, url)
	var applied, files int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("../../migrations")
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			files++
		}
	}
	if applied != files || files == 0 {
		t.Fatalf("%d migrations recorded, %d files", applied, files)
	}
	// And once more on the migrated database: nothing to do, no error.
	if out, err := runProcess(t, "migrate", "RAGENT_DATABASE_URL="+url, "RAGENT_LOG_LEVEL=warn"); err != nil {
		t.Fatalf("second migrate: %v\n%s", err, out)
	}
}

func TestVersionAndBadConfig(t *testing.T) {
	if out, err := runProcess(t, "version"); err != nil || !strings.HasPrefix(out, "ragent ") {
		t.Fatalf("version: %v %q", err, out)
	}
	out, err := runProcess(t, "serve", "RAGENT_CHAT_MAX_CONCURRENT=zero", "RAGENT_LLM_PROVIDER=magic")
	if err == nil || !strings.Contains(out, "RAGENT_CHAT_MAX_CONCURRENT") || !strings.Contains(out, "RAGENT_LLM_PROVIDER") {
		t.Fatalf("invalid settings must stop the start with every problem named: %v %q", err, out)
	}
}
