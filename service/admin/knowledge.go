package admin

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// KnowledgeBaseStore keeps knowledge bases.
type KnowledgeBaseStore interface {
	CreateKnowledgeBase(ctx context.Context, kb *service.KnowledgeBase) error
	KnowledgeBase(ctx context.Context, id service.ID) (*service.KnowledgeBase, error)
	KnowledgeBases(ctx context.Context, after service.ID, limit int) ([]*service.KnowledgeBase, error)
	UpdateKnowledgeBase(ctx context.Context, kb *service.KnowledgeBase) error
	DeleteKnowledgeBase(ctx context.Context, id service.ID) error
}

// EmbeddingDefaults describe the embedder new knowledge bases are built with.
type EmbeddingDefaults struct {
	Model        string
	Dim          int
	VectorWeight float64 // hybrid weight of the vector list (keyword weighs 1)
}

// KnowledgeBases manages knowledge bases.
type KnowledgeBases struct {
	store KnowledgeBaseStore
	ids   service.IDGenerator
	emb   EmbeddingDefaults
}

// NewKnowledgeBases returns the knowledge-base use case.
func NewKnowledgeBases(store KnowledgeBaseStore, ids service.IDGenerator, emb EmbeddingDefaults) *KnowledgeBases {
	return &KnowledgeBases{store: store, ids: ids, emb: emb}
}

// KnowledgeBaseInput creates or changes a knowledge base; nil fields keep
// their value (or the default on create).
type KnowledgeBaseInput struct {
	Name         *string  `json:"name"`
	Description  *string  `json:"description"`
	ChunkSize    *int     `json:"chunkSize"`
	ChunkOverlap *int     `json:"chunkOverlap"`
	VectorWeight *float64 `json:"vectorWeight"`
}

func (in KnowledgeBaseInput) apply(kb *service.KnowledgeBase) error {
	if in.Name != nil {
		kb.Name = strings.TrimSpace(*in.Name)
	}
	if in.Description != nil {
		kb.Description = strings.TrimSpace(*in.Description)
	}
	if in.ChunkSize != nil {
		kb.ChunkSize = *in.ChunkSize
	}
	if in.ChunkOverlap != nil {
		kb.ChunkOverlap = *in.ChunkOverlap
	}
	if in.VectorWeight != nil {
		kb.VectorWeight = *in.VectorWeight
	}
	switch n := utf8.RuneCountInString(kb.Name); {
	case n == 0:
		return service.Errorf(service.ErrInvalid, "name is required")
	case n > 100:
		return service.Errorf(service.ErrInvalid, "name must be at most 100 characters")
	}
	if utf8.RuneCountInString(kb.Description) > 2000 {
		return service.Errorf(service.ErrInvalid, "description must be at most 2000 characters")
	}
	if kb.ChunkSize < 64 || kb.ChunkSize > 4096 {
		return service.Errorf(service.ErrInvalid, "chunkSize must be between 64 and 4096 tokens")
	}
	if kb.ChunkOverlap < 0 || kb.ChunkOverlap >= kb.ChunkSize/2 {
		return service.Errorf(service.ErrInvalid, "chunkOverlap must be between 0 and half of chunkSize")
	}
	if kb.VectorWeight < 0 || kb.VectorWeight > 10 {
		return service.Errorf(service.ErrInvalid, "vectorWeight must be between 0 and 10")
	}
	return nil
}

// Create adds a knowledge base embedded with the configured model.
func (k *KnowledgeBases) Create(ctx context.Context, in KnowledgeBaseInput) (*service.KnowledgeBase, error) {
	kb := &service.KnowledgeBase{
		EmbeddingModel: k.emb.Model, EmbeddingDim: k.emb.Dim, VectorWeight: k.emb.VectorWeight,
		ChunkSize: 512, ChunkOverlap: 64,
	}
	if err := in.apply(kb); err != nil {
		return nil, err
	}
	id, err := k.ids.NextID()
	if err != nil {
		return nil, err
	}
	kb.ID = id
	if err := k.store.CreateKnowledgeBase(ctx, kb); err != nil {
		if errors.Is(err, service.ErrConflict) {
			return nil, service.Errorf(service.ErrConflict, "a knowledge base named %q exists", kb.Name)
		}
		return nil, err
	}
	return kb, nil
}

// Get returns one knowledge base.
func (k *KnowledgeBases) Get(ctx context.Context, id service.ID) (*service.KnowledgeBase, error) {
	return k.store.KnowledgeBase(ctx, id)
}

// List pages through knowledge bases.
func (k *KnowledgeBases) List(ctx context.Context, after service.ID, limit int) ([]*service.KnowledgeBase, error) {
	return k.store.KnowledgeBases(ctx, after, limit)
}

// Update changes a knowledge base. Chunk settings apply to documents
// ingested or reindexed afterwards.
func (k *KnowledgeBases) Update(ctx context.Context, id service.ID, in KnowledgeBaseInput) (*service.KnowledgeBase, error) {
	kb, err := k.store.KnowledgeBase(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := in.apply(kb); err != nil {
		return nil, err
	}
	if err := k.store.UpdateKnowledgeBase(ctx, kb); err != nil {
		if errors.Is(err, service.ErrConflict) {
			return nil, service.Errorf(service.ErrConflict, "a knowledge base named %q exists", kb.Name)
		}
		return nil, err
	}
	return kb, nil
}

// Delete removes a knowledge base, its documents and their chunks.
func (k *KnowledgeBases) Delete(ctx context.Context, id service.ID) error {
	return k.store.DeleteKnowledgeBase(ctx, id)
}
