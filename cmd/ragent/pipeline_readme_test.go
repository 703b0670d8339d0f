package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// readmeScript returns the bash block after the marker in docs/pipelines.md.
func readmeScript(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "pipelines.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), marker+"\n```bash\n")
	if !ok {
		t.Fatalf("docs/pipelines.md has no bash block after %s", marker)
	}
	script, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("the pipelines page's script block is not closed")
	}
	return script
}

// The script in docs/pipelines.md runs as written against an
// instance: it makes a key, uploads by external id, waits and searches.
func TestPipelineREADMEScript(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if testenv.Required() {
				t.Fatalf("%s is needed to run the pipeline script of docs/pipelines.md (apt-get install %s)", tool, tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	in, c, kb := ingestEnv(t, testConfig(t))
	dir := t.TempDir()
	path := filepath.Join(dir, "pipeline.sh")
	if err := os.WriteFile(path, []byte(readmeScript(t, "<!-- pipeline-script -->")), 0o700); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		t.Helper()
		cmd := exec.Command("bash", path)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "RAGENT="+in.url, "KB_ID="+kb, "RAGENT_USER=admin", "RAGENT_PASSWORD=admin-password")
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
			}
		}()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the pipelines page's script failed: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run()
	if !strings.Contains(out, "vpn2.example.com") {
		t.Fatalf("the script's search did not find the document:\n%s", out)
	}
	d := c.byExternalID(kb, "handbook/vpn")
	if d == nil || d.Status != "ready" {
		t.Fatalf("after the script: %+v", d)
	}
	// Run again: a second key, the same document (same bytes: unchanged).
	run()
	if again := c.byExternalID(kb, "handbook/vpn"); again == nil || again.ID != d.ID || again.Generation != d.Generation {
		t.Fatalf("second run: %+v, first %+v", again, d)
	}
}
