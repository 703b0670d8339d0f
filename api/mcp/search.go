package mcp

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

type searchIn struct {
	Query            string             `json:"query" jsonschema:"what to look for, in natural language or keywords"`
	KnowledgeBaseIDs []service.ID       `json:"knowledgeBaseIds,omitempty" jsonschema:"knowledge bases to search (ids from list_knowledge_bases); omitted: every one the key can read"`
	Mode             service.SearchMode `json:"mode,omitempty" jsonschema:"hybrid (default), keyword or vector"`
	TopK             int                `json:"topK,omitempty" jsonschema:"how many results (default 5)"`
}

type searchResult struct {
	ChunkID         service.ID `json:"chunkId"`
	DocumentID      service.ID `json:"documentId"`
	DocumentName    string     `json:"documentName"`
	KnowledgeBaseID service.ID `json:"knowledgeBaseId"`
	Section         string     `json:"section"`
	Score           float64    `json:"score"`
	Content         string     `json:"content"`
	Link            string     `json:"link" jsonschema:"the document on ragent's HTTP API (GET with the same API key)"`
}

type searchOut struct {
	Results []searchResult `json:"results"`
	// KeywordOnly are knowledge bases searched by keyword only: their
	// vectors are in a space this server cannot embed the query in.
	KeywordOnly []retrieve.KeywordOnly `json:"keywordOnly,omitempty"`
}

func (h *Handler) search(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, searchOut, error) {
	res, err := h.deps.Search.Run(ctx, c.p, retrieve.Query{Text: in.Query, KnowledgeBaseIDs: in.KnowledgeBaseIDs, TopK: in.TopK, Mode: in.Mode})
	if err != nil {
		return nil, searchOut{}, err
	}
	out := searchOut{Results: make([]searchResult, len(res.Results)), KeywordOnly: res.KeywordOnly}
	for i, r := range res.Results {
		out.Results[i] = searchResult{ChunkID: r.ChunkID, DocumentID: r.DocumentID, DocumentName: r.DocumentName, KnowledgeBaseID: r.KnowledgeBaseID,
			Section: r.Section, Score: r.Score, Content: r.Content, Link: documentLink(c, r.DocumentID)}
	}
	return nil, out, nil
}

func documentLink(c *caller, id service.ID) string {
	return c.base + "/api/v1/documents/" + id.String()
}
