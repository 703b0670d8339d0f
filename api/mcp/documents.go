package mcp

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ragent-go/ragent/service"
)

type getDocumentIn struct {
	DocumentID  service.ID `json:"documentId"`
	FromOrdinal int        `json:"fromOrdinal,omitempty" jsonschema:"the first chunk to return, by ordinal (default 0: the document's first)"`
	Limit       int        `json:"limit,omitempty" jsonschema:"chunks to return, 0 to 100 (default 20)"`
}

type documentChunk struct {
	ID      service.ID `json:"id"`
	Ordinal int        `json:"ordinal"`
	Section string     `json:"section"`
	Content string     `json:"content"`
}

type getDocumentOut struct {
	ID              service.ID      `json:"id"`
	KnowledgeBaseID service.ID      `json:"knowledgeBaseId"`
	Name            string          `json:"name"`
	Mime            string          `json:"mime"`
	Size            int64           `json:"size"`
	Status          string          `json:"status"`
	ChunkCount      int             `json:"chunkCount"`
	UpdatedAt       time.Time       `json:"updatedAt"`
	Link            string          `json:"link"`
	Chunks          []documentChunk `json:"chunks"`
	NextOrdinal     *int            `json:"nextOrdinal,omitempty" jsonschema:"pass as fromOrdinal for the next chunks; absent when there are no more"`
}

func (h *Handler) getDocument(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in getDocumentIn) (*mcp.CallToolResult, getDocumentOut, error) {
	limit := in.Limit
	switch {
	case limit == 0:
		limit = 20
	case limit < 0 || limit > 100 || in.FromOrdinal < 0:
		return nil, getDocumentOut{}, service.Errorf(service.ErrInvalid, "limit must be between 0 and 100 and fromOrdinal not negative")
	}
	doc, err := h.deps.Ingest.Document(ctx, c.p, in.DocumentID)
	if err != nil {
		return nil, getDocumentOut{}, err
	}
	out := getDocumentOut{ID: doc.ID, KnowledgeBaseID: doc.KnowledgeBaseID, Name: doc.Name, Mime: doc.Mime, Size: doc.Size,
		Status: string(doc.Status), ChunkCount: doc.ChunkCount, UpdatedAt: doc.UpdatedAt, Link: documentLink(c, doc.ID), Chunks: []documentChunk{}}
	chunks, err := h.deps.Ingest.Chunks(ctx, c.p, doc.ID, in.FromOrdinal-1, limit)
	if err != nil {
		return nil, getDocumentOut{}, err
	}
	for _, ch := range chunks {
		out.Chunks = append(out.Chunks, documentChunk{ID: ch.ID, Ordinal: ch.Ordinal, Section: ch.Section, Content: ch.Content})
	}
	if len(chunks) == limit {
		next := chunks[len(chunks)-1].Ordinal + 1
		out.NextOrdinal = &next
	}
	return nil, out, nil
}

type getChunkIn struct {
	ChunkID service.ID `json:"chunkId"`
}

type getChunkOut struct {
	ID              service.ID `json:"id"`
	DocumentID      service.ID `json:"documentId"`
	DocumentName    string     `json:"documentName"`
	KnowledgeBaseID service.ID `json:"knowledgeBaseId"`
	Ordinal         int        `json:"ordinal"`
	Section         string     `json:"section"`
	Content         string     `json:"content"`
	Link            string     `json:"link"`
}

func (h *Handler) getChunk(ctx context.Context, c *caller, _ *mcp.CallToolRequest, in getChunkIn) (*mcp.CallToolResult, getChunkOut, error) {
	ch, err := h.deps.Ingest.Chunk(ctx, c.p, in.ChunkID)
	if err != nil {
		return nil, getChunkOut{}, err
	}
	doc, err := h.deps.Ingest.Document(ctx, c.p, ch.DocumentID)
	if err != nil {
		return nil, getChunkOut{}, err
	}
	return nil, getChunkOut{ID: ch.ID, DocumentID: ch.DocumentID, DocumentName: doc.Name, KnowledgeBaseID: ch.KnowledgeBaseID,
		Ordinal: ch.Ordinal, Section: ch.Section, Content: ch.Content, Link: documentLink(c, ch.DocumentID)}, nil
}
