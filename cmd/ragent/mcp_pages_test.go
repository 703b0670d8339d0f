package main

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
)

type mcpKBPage struct {
	KnowledgeBases []struct{ ID, Name, Role string }
	NextCursor     string
}

// mcpAllKBs pages through list_knowledge_bases as a client following
// nextCursor does, and returns the ids in order and the pages it took.
func mcpAllKBs(t *testing.T, s *mcpSession, limit int) (ids []string, pages int) {
	t.Helper()
	args := map[string]any{}
	if limit > 0 {
		args["limit"] = limit
	}
	for {
		var page mcpKBPage
		structured(t, s.call("list_knowledge_bases", args, nil), &page)
		pages++
		for _, kb := range page.KnowledgeBases {
			ids = append(ids, kb.ID)
		}
		if page.NextCursor == "" {
			return ids, pages
		}
		if limit > 0 && len(page.KnowledgeBases) != limit || limit == 0 && len(page.KnowledgeBases) != 100 {
			t.Fatalf("a page of %d with a next cursor (limit %d)", len(page.KnowledgeBases), limit)
		}
		if pages > 500 {
			t.Fatalf("list_knowledge_bases pages on and on: %v", ids)
		}
		args["cursor"] = page.NextCursor
	}
}

// TestMCPListKnowledgeBasesPages: list_knowledge_bases pages as MCP's list
// methods do (an opaque cursor, nextCursor until the last page), so a key
// with many knowledge bases gets every one, once and in order: an unlimited
// key past the default page of 100 and in pages of 7, and a key limited to
// 104 of them gets exactly those. A cursor is no way around the key's
// limits, and forged cursors and limits are refused.
func TestMCPListKnowledgeBasesPages(t *testing.T) {
	f := newMCPFixture(t, nil) // f.kb, f.other
	want := []string{f.kb, f.other}
	for i := range 103 {
		want = append(want, f.admin.createKB(fmt.Sprintf("many-%03d", i)))
	}
	slices.SortFunc(want, compareIDs)

	all := mustConnect(t, f.in, f.unlimited)
	for _, limit := range []int{0, 7, 200} {
		ids, pages := mcpAllKBs(t, all, limit)
		if !slices.Equal(ids, want) {
			t.Errorf("limit %d: %d knowledge bases %v, want %d %v", limit, len(ids), ids, len(want), want)
		}
		if wantPages := map[int]int{0: 2, 7: 15, 200: 1}[limit]; pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}

	// A key limited to all but one of them, many: exactly those.
	limited := slices.DeleteFunc(slices.Clone(want), func(id string) bool { return id == f.other })
	many := mustConnect(t, f.in, createKey(t, f.admin, map[string]any{"name": "many", "scopes": []string{"read"}, "knowledgeBaseIds": limited}).Key)
	if ids, pages := mcpAllKBs(t, many, 0); !slices.Equal(ids, limited) || pages != 2 {
		t.Errorf("limited key: %d knowledge bases in %d pages, want %d in 2", len(ids), pages, len(limited))
	}

	// The unlimited key's cursor just before f.other, given to the key
	// limited to f.kb: its next page is still only its own (none).
	var first mcpKBPage
	structured(t, all.call("list_knowledge_bases", map[string]any{"limit": 1}, nil), &first)
	if len(first.KnowledgeBases) != 1 || first.KnowledgeBases[0].ID != want[0] || first.NextCursor == "" {
		t.Fatalf("first page of one %+v", first)
	}
	one := mustConnect(t, f.in, f.full)
	var after mcpKBPage
	structured(t, one.call("list_knowledge_bases", map[string]any{"cursor": first.NextCursor}, nil), &after)
	for _, kb := range after.KnowledgeBases {
		if kb.ID != f.kb {
			t.Errorf("a cursor reached %s, outside the key's knowledge bases", kb.ID)
		}
	}

	enc := base64.RawURLEncoding.EncodeToString
	for _, args := range []map[string]any{
		{"cursor": "not a cursor!"},
		{"cursor": enc([]byte("kb:abc"))},
		{"cursor": enc([]byte("doc:" + f.kb))},
		{"cursor": enc([]byte("kb:-5"))},
		{"cursor": f.kb}, // the id itself is not the cursor
		{"cursor": strings.Repeat("A", 100000)},
		{"limit": 201},
		{"limit": -1},
	} {
		res := all.call("list_knowledge_bases", args, nil)
		if !res.IsError {
			t.Errorf("%.60v accepted: %.200s", args, resultText(res))
		}
	}
	if res := all.call("list_knowledge_bases", map[string]any{"cursor": 5}, nil); !res.IsError {
		t.Errorf("a number as cursor accepted: %s", resultText(res))
	}
}

// compareIDs orders decimal id strings by value.
func compareIDs(a, b string) int {
	var x, y int64
	fmt.Sscan(a, &x)
	fmt.Sscan(b, &y)
	return cmp.Compare(x, y)
}
