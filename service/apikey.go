package service

import (
	"slices"
	"time"
)

// Scope is one kind of work an API key may do. A key acts as its owner,
// narrowed to its scopes (which routes it reaches, api's scope table) and
// to its knowledge bases (Access).
type Scope string

const (
	ScopeRead   Scope = "read"   // list and read knowledge bases, documents, chunks, conversations
	ScopeSearch Scope = "search" // POST /search
	ScopeChat   Scope = "chat"   // chat, stop, own conversations
	ScopeIngest Scope = "ingest" // upload, reindex, delete documents (the editor role still applies)
)

// Scopes lists every scope, in the order the UI shows them.
var Scopes = []Scope{ScopeRead, ScopeSearch, ScopeChat, ScopeIngest}

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return slices.Contains(Scopes, s) }

// APIKeyPrefix starts every API key, so a bearer token says what it is
// (and secret scanners can find leaked keys).
const APIKeyPrefix = "rk_"

// APIKey is a long-lived credential a machine uses to act as its owner.
// The key itself is shown once at creation; storage keeps only its SHA-256.
type APIKey struct {
	ID       ID     `json:"id"`
	UserID   ID     `json:"userId"`
	Username string `json:"username"` // the owner's
	Name     string `json:"name"`
	// Prefix is the key's first characters, enough to tell keys apart.
	Prefix string  `json:"prefix"`
	Scopes []Scope `json:"scopes"`
	// KnowledgeBaseIDs limits the key to these knowledge bases; nil means
	// every one its owner may read.
	KnowledgeBaseIDs []ID       `json:"knowledgeBaseIds"`
	ExpiresAt        *time.Time `json:"expiresAt"`
	LastUsedAt       *time.Time `json:"lastUsedAt"`
	CreatedAt        time.Time  `json:"createdAt"`
	Hash             []byte     `json:"-"` // SHA-256 of the key
}

// KeyGrant is what an API key narrows its owner's principal to.
type KeyGrant struct {
	KeyID  ID
	Scopes []Scope
	// KnowledgeBaseIDs, when not nil, are the only knowledge bases the key
	// reaches (those of them the owner can read).
	KnowledgeBaseIDs []ID
}

// HasScope reports whether the grant includes s.
func (g *KeyGrant) HasScope(s Scope) bool { return g != nil && slices.Contains(g.Scopes, s) }

// allows reports whether the grant reaches knowledge base id.
func (g *KeyGrant) allows(id ID) bool {
	return g == nil || g.KnowledgeBaseIDs == nil || slices.Contains(g.KnowledgeBaseIDs, id)
}

// Within reports whether a chat turn that searched kbIDs stays within the
// grant, so the grant may read or continue its conversation: always for an
// unlimited grant (it sees what its owner sees); for one limited to
// knowledge bases, when every one of kbIDs is among them. Unknown
// knowledge bases (nil: a turn stored before they were recorded) are never
// within a limit.
func (g *KeyGrant) Within(kbIDs []ID) bool {
	if g == nil || g.KnowledgeBaseIDs == nil {
		return true
	}
	if kbIDs == nil {
		return false
	}
	for _, id := range kbIDs {
		if !slices.Contains(g.KnowledgeBaseIDs, id) {
			return false
		}
	}
	return true
}

// HistoryLimit returns the knowledge bases the grant confines history to:
// nil for an unlimited grant (or none), else its list.
func (g *KeyGrant) HistoryLimit() []ID {
	if g == nil {
		return nil
	}
	return g.KnowledgeBaseIDs
}
