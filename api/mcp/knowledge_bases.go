package mcp

import (
	"cmp"
	"context"
	"encoding/base64"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/service"
)

// listKBsIn pages as MCP's list methods do (the spec's "Pagination"): an
// opaque cursor from the previous page's nextCursor.
type listKBsIn struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"nextCursor of the previous page (opaque); omitted: the first page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"knowledge bases per page, 1 to 200 (default 100)"`
}

type knowledgeBase struct {
	ID            service.ID `json:"id"`
	Name          string     `json:"name"`
	Description   string     `json:"description"`
	DocumentCount int        `json:"documentCount"`
	Role          string     `json:"role" jsonschema:"the key's role on it: viewer, editor or manager"`
}

type listKBsOut struct {
	KnowledgeBases []knowledgeBase `json:"knowledgeBases"`
	NextCursor     string          `json:"nextCursor,omitempty" jsonschema:"pass as cursor for the next page; absent on the last page"`
}

const (
	defaultKBPage = 100
	maxKBPage     = 200
)

// A cursor is the last id of its page, encoded so that clients treat it as
// the opaque token the spec says it is.
func kbCursor(id service.ID) string {
	return base64.RawURLEncoding.EncodeToString([]byte("kb:" + id.String()))
}

func parseKBCursor(cursor string) (service.ID, error) {
	if cursor == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	rest, ok := strings.CutPrefix(string(b), "kb:")
	if err != nil || !ok {
		return 0, service.Errorf(service.ErrInvalid, "invalid cursor: pass nextCursor from the previous page as it is")
	}
	id, err := service.ParseID(rest)
	if err != nil {
		return 0, service.Errorf(service.ErrInvalid, "invalid cursor: pass nextCursor from the previous page as it is")
	}
	return id, nil
}

func (h *Handler) listKnowledgeBases(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in listKBsIn) (*mcp.CallToolResult, listKBsOut, error) {
	limit := cmp.Or(in.Limit, defaultKBPage)
	if limit < 1 || limit > maxKBPage {
		return nil, listKBsOut{}, service.Errorf(service.ErrInvalid, "limit must be between 1 and %d", maxKBPage)
	}
	after, err := parseKBCursor(in.Cursor)
	if err != nil {
		return nil, listKBsOut{}, err
	}
	// One more than the page tells whether another follows, so the last
	// page has no cursor (no empty page to fetch).
	kbs, err := h.deps.KnowledgeBases.List(ctx, c.p, after, limit+1)
	if err != nil {
		return nil, listKBsOut{}, err
	}
	var out listKBsOut
	if len(kbs) > limit {
		kbs = kbs[:limit]
		out.NextCursor = kbCursor(kbs[limit-1].ID)
	}
	out.KnowledgeBases = make([]knowledgeBase, len(kbs))
	for i, kb := range kbs {
		out.KnowledgeBases[i] = knowledgeBase{ID: kb.ID, Name: kb.Name, Description: kb.Description, DocumentCount: kb.DocumentCount, Role: string(kb.Role)}
	}
	return nil, out, nil
}
