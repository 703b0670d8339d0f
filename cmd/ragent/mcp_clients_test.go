package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMCPOfficialClients runs the official MCP SDKs — Python (PyPI mcp)
// and TypeScript (npm @modelcontextprotocol/sdk), code nobody here wrote —
// against a running instance over Streamable HTTP (testdata/mcp/client.*):
// the tools, a search, an ask with progress and citations, feedback on its
// answer by message id, refusals outside
// the key's knowledge bases (not found), a refused ask for a key without
// the chat scope, list_knowledge_bases paged with nextCursor, and a
// refused bad key.
func TestMCPOfficialClients(t *testing.T) {
	// The MCP SDKs the `clients` service installs beside the OpenAI ones.
	python, nodePath := clientSDKs(t, "MCP", "mcp", "@modelcontextprotocol/sdk")
	f := newMCPFixture(t, nil)
	// An answer the clients' key may not rate: the owner's, from the
	// knowledge base outside that key's limit.
	otherMessage := mcpAnswer(t, f, f.unlimited, map[string]any{"question": "When are salaries paid?", "knowledgeBaseIds": []string{f.other}})
	clients := []struct {
		name string
		cmd  []string
	}{
		{"python", []string{python, filepath.Join("testdata", "mcp", "client.py")}},
		{"typescript", []string{"node", filepath.Join("testdata", "mcp", "client.cjs")}},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, c.cmd[0], c.cmd[1:]...)
			cmd.Env = append(os.Environ(), "RAGENT_URL="+f.in.url, "RAGENT_KEY="+f.full, "RAGENT_NOCHAT_KEY="+f.noChat, "RAGENT_ALL_KEY="+f.unlimited,
				"RAGENT_KB="+f.kb, "RAGENT_OTHER_KB="+f.other, "RAGENT_OTHER_CHUNK="+f.otherChunk,
				"RAGENT_OTHER_MESSAGE="+otherMessage, "NODE_PATH="+nodePath)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "mcp: ok") {
				t.Fatalf("%v: %v\n%s", c.cmd, err, out)
			}
			t.Logf("%s", out)
		})
	}
}
