package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// clientSDKs finds the official SDKs that scripts/services.sh installs for
// the `clients` service: its venv's Python with module pyModule (PyPI's
// openai, mcp) and its npm prefix's node_modules with package nodePackage
// (npm's openai, @modelcontextprotocol/sdk), by RAGENT_OPENAI_PYTHON and
// RAGENT_OPENAI_NODE_PATH or where the script puts them (clientPaths).
// Missing ones skip the test on a developer machine and fail it under
// RAGENT_REQUIRE_SERVICES=1, naming the SDKs as what.
func clientSDKs(t *testing.T, what, pyModule, nodePackage string) (python, nodePath string) {
	t.Helper()
	python, nodePath = clientPaths()
	var missing []string
	if err := exec.Command(python, "-c", "import "+pyModule).Run(); err != nil {
		missing = append(missing, "python "+pyModule+" ("+python+": "+err.Error()+")")
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	} else if _, err := os.Stat(filepath.Join(nodePath, filepath.FromSlash(nodePackage), "package.json")); err != nil {
		missing = append(missing, "node "+nodePackage+" ("+err.Error()+")")
	}
	if len(missing) > 0 {
		if testenv.Required() {
			t.Fatalf("%s SDKs unavailable (RAGENT_REQUIRE_SERVICES=1): %v; run scripts/services.sh start clients", what, missing)
		}
		t.Skipf("%s SDKs unavailable: %v; run scripts/services.sh start clients", what, missing)
	}
	return python, nodePath
}

// sdkScript is an official SDK's client script in testdata: client.py run
// by the Python SDK's interpreter, or client.cjs run by node.
type sdkScript struct {
	name string // the subtest's: python or node
	cmd  []string
}

// sdkScripts are the two client scripts of testdata/dir.
func sdkScripts(python, dir string) []sdkScript {
	return []sdkScript{
		{"python", []string{python, filepath.Join("testdata", dir, "client.py")}},
		{"node", []string{"node", filepath.Join("testdata", dir, "client.cjs")}},
	}
}

// run runs the script with args, env added to the test's environment, for
// at most five minutes, logs its output and returns it; a run that fails
// fails the test with its output.
func (s sdkScript) run(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cmd[0], append(s.cmd[1:], args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v %v: %v\n%s", s.cmd, args, err, out)
	}
	t.Logf("%s", out)
	return string(out)
}

// clientPaths are the `clients` service's Python and node_modules (the
// venv and npm prefix of scripts/services.sh), or RAGENT_OPENAI_PYTHON and
// RAGENT_OPENAI_NODE_PATH.
func clientPaths() (python, nodePath string) {
	cache := os.Getenv("RAGENT_SERVICES_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "ragent")
	}
	python = os.Getenv("RAGENT_OPENAI_PYTHON")
	if python == "" {
		python = filepath.Join(cache, "clients", "venv", "bin", "python")
	}
	nodePath = os.Getenv("RAGENT_OPENAI_NODE_PATH")
	if nodePath == "" {
		nodePath = filepath.Join(cache, "clients", "npm", "node_modules")
	}
	return python, nodePath
}

// TestOpenAIOfficialClients runs the official openai SDKs — Python (PyPI)
// and Node (npm), code nobody here wrote — against a running instance with
// the fake model: models, a non-stream and a streamed completion with the
// sources extension and usage, history, 404 for an unknown model, 401 for a
// bad key (testdata/openai/client.*, mode ok); then, with the caller's
// share of the queue held full, 429 with Retry-After stream or not (mode
// busy).
func TestOpenAIOfficialClients(t *testing.T) {
	python, nodePath := clientSDKs(t, "OpenAI", "openai", "openai")
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	cfg.ChatMaxConcurrent, cfg.ChatMaxQueuedPerUser, cfg.ChatMaxWait = 1, 1, 60*time.Second
	in := start(t, cfg)
	admin := in.adminClient(t)
	kb := seedKnowledge(t, in, admin.token)
	var kbJSON struct{ Name string }
	admin.do("GET", "/api/v1/knowledge-bases/"+kb, nil).json(t, &kbJSON)
	key := chatKey(t, admin, "sdk")

	env := []string{"RAGENT_URL=" + in.url, "RAGENT_KEY=" + key, "RAGENT_MODEL=ragent/" + kbJSON.Name, "NODE_PATH=" + nodePath}
	clients := sdkScripts(python, "openai")
	for _, c := range clients {
		t.Run(c.name+"/ok", func(t *testing.T) { c.run(t, env, "ok") })
	}

	// Hold the only slot and the user's one place in the queue: the SDKs'
	// requests are refused at once.
	var wg sync.WaitGroup
	keyClient := in.client(t, key)
	const holdQ, waitQ = "holds the slot #gate", "holds the queue place #gate"
	wg.Go(func() {
		keyClient.completions(context.Background(), map[string]any{"model": "ragent", "messages": userMsg(holdQ)}, nil)
	})
	if q := llm.nextStart(t); q != holdQ {
		t.Fatalf("started %q", q)
	}
	wg.Go(func() {
		keyClient.completions(context.Background(), map[string]any{"model": "ragent", "stream": true, "messages": userMsg(waitQ)}, nil)
	})
	waitQueued(t, admin, 1)
	for _, c := range clients {
		t.Run(c.name+"/busy", func(t *testing.T) { c.run(t, env, "busy") })
	}
	llm.open(holdQ)
	llm.open(waitQ)
	wg.Wait()
}
