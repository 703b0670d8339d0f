package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// TestLimitsServed: GET /api/v1/limits serves the numbers the use cases
// enforce, which the web UI's forms use: a value at a limit is accepted, one
// past it refused.
func TestLimitsServed(t *testing.T) {
	in := start(t, testConfig(t))
	c := in.adminClient(t)

	var got service.Limits
	r := c.do("GET", "/api/v1/limits", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /limits: %d", r.Status)
	}
	r.json(t, &got)
	if got != service.InputLimits || got.QuestionRunes != service.MaxQuestionRunes || got.NameRunes == 0 {
		t.Fatalf("served %+v, want %+v", got, service.InputLimits)
	}

	name := func(n int) string { return strings.Repeat("名", n) }
	tests := []struct {
		name, method, path string
		body               any
		ok                 int
	}{
		{"knowledge-base name at the limit", "POST", "/api/v1/knowledge-bases", map[string]any{"name": name(got.NameRunes)}, http.StatusCreated},
		{"knowledge-base name past it", "POST", "/api/v1/knowledge-bases", map[string]any{"name": name(got.NameRunes + 1)}, http.StatusBadRequest},
		{"chunk size at the maximum", "POST", "/api/v1/knowledge-bases", map[string]any{"name": "max chunks", "chunkSize": got.ChunkSizeMax}, http.StatusCreated},
		{"chunk size past it", "POST", "/api/v1/knowledge-bases", map[string]any{"name": "big chunks", "chunkSize": got.ChunkSizeMax + 1}, http.StatusBadRequest},
		{"chunk size at the minimum", "POST", "/api/v1/knowledge-bases", map[string]any{"name": "min chunks", "chunkSize": got.ChunkSizeMin, "chunkOverlap": 0}, http.StatusCreated},
		{"chunk size below it", "POST", "/api/v1/knowledge-bases", map[string]any{"name": "tiny chunks", "chunkSize": got.ChunkSizeMin - 1, "chunkOverlap": 0}, http.StatusBadRequest},
		{"term at the limit", "POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": name(got.SourceTermRunes), "targetTerm": name(got.TargetTermRunes)}, http.StatusCreated},
		{"term past it", "POST", "/api/v1/admin/term-mappings", map[string]any{"sourceTerm": name(got.SourceTermRunes + 1), "targetTerm": "x"}, http.StatusBadRequest},
		{"group name past the limit", "POST", "/api/v1/groups", map[string]any{"name": name(got.NameRunes + 1)}, http.StatusBadRequest},
		{"question past the limit", "POST", "/api/v1/chat", map[string]any{"question": name(got.QuestionRunes + 1)}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := c.do(tt.method, tt.path, tt.body); r.Status != tt.ok {
				t.Fatalf("%s %s: %d, want %d", tt.method, tt.path, r.Status, tt.ok)
			}
		})
	}
}
