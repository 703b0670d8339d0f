package main

import (
	"strings"
	"testing"
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
	env := []string{"RAGENT_URL=" + f.in.url, "RAGENT_KEY=" + f.full, "RAGENT_NOCHAT_KEY=" + f.noChat, "RAGENT_ALL_KEY=" + f.unlimited,
		"RAGENT_KB=" + f.kb, "RAGENT_OTHER_KB=" + f.other, "RAGENT_OTHER_CHUNK=" + f.otherChunk,
		"RAGENT_OTHER_MESSAGE=" + otherMessage, "NODE_PATH=" + nodePath}
	for _, c := range sdkScripts(python, "mcp") {
		t.Run(c.name, func(t *testing.T) {
			if out := c.run(t, env); !strings.Contains(out, "mcp: ok") {
				t.Fatalf("%v: no \"mcp: ok\" in its output", c.cmd)
			}
		})
	}
}
