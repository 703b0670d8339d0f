package service

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// EmbeddingSpace is what makes two vectors comparable: the model, its
// dimension and the prefixes put before queries and documents (an
// asymmetric model such as e5 embeds "query: …" and "passage: …"). A
// knowledge base records the space its chunks were embedded in; vectors of
// different spaces are never searched together, even when their dimensions
// agree. The prefixes are opaque strings from the configuration.
type EmbeddingSpace struct {
	Model          string `json:"model"`
	Dim            int    `json:"dim"`
	QueryPrefix    string `json:"queryPrefix"`
	DocumentPrefix string `json:"documentPrefix"`
}

// Key names the space in storage: the first 16 hex digits of the SHA-256
// of its four fields joined by U+001F. Migration 0009 computes the same
// key in SQL for the knowledge bases that existed before it.
func (s EmbeddingSpace) Key() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{s.Model, strconv.Itoa(s.Dim), s.QueryPrefix, s.DocumentPrefix}, "\x1f")))
	return hex.EncodeToString(sum[:8])
}

// String is the space as people read it, for logs and errors.
func (s EmbeddingSpace) String() string {
	out := s.Model + " (" + strconv.Itoa(s.Dim) + " dimensions"
	if s.QueryPrefix != "" || s.DocumentPrefix != "" {
		out += ", prefixes " + strconv.Quote(s.QueryPrefix) + "/" + strconv.Quote(s.DocumentPrefix)
	}
	return out + ")"
}

// Reembedding is the progress of moving a knowledge base to another
// embedding space: Done of Total ready documents have vectors in Target.
// Until all have, search uses the knowledge base's recorded space.
type Reembedding struct {
	Target EmbeddingSpace `json:"target"`
	Done   int            `json:"done"`
	Total  int            `json:"total"`
}
