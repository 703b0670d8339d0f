package service

import (
	"net/url"
	"slices"
	"strings"
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

// WidgetKeyPrefix starts every public widget key. A widget key is a kind of
// API key published in a web page (docs/widget.md): it only chats, only
// with its knowledge bases, only from its allowed origins, and every
// visitor is a user of their own (Principal.Visitor).
const WidgetKeyPrefix = "pk_"

// KeyKind tells API keys from widget keys.
type KeyKind string

const (
	KeyKindAPI    KeyKind = "api"
	KeyKindWidget KeyKind = "widget"
)

// WidgetSettings are what a widget key adds to an API key.
type WidgetSettings struct {
	// Origins are the only page origins ("https://intranet.example.com")
	// the widget answers; normalized, lowercase, without a trailing slash.
	Origins []string `json:"origins"`
	// OriginRate and VisitorRate bound chats per minute from one origin and
	// from one visitor.
	OriginRate  int `json:"originRate"`
	VisitorRate int `json:"visitorRate"`
}

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
	// Kind is api or widget; Widget is set for widget keys.
	Kind   KeyKind         `json:"kind"`
	Widget *WidgetSettings `json:"widget,omitempty"`
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

// NormalizeOrigin turns "scheme://host[:port]" into the form browsers send
// in the Origin header: lower case, without the scheme's default port. It
// refuses anything with a path, query, user or a scheme other than http(s).
func NormalizeOrigin(s string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return scheme + "://" + host, true
}

// ValidVisitorID reports whether v is a widget visitor id as the widget
// makes them: 16 to 64 characters of [A-Za-z0-9_-] (a random id the page
// keeps). Anything else is refused before it names a queue or a rate key.
func ValidVisitorID(v string) bool {
	if len(v) < 16 || len(v) > 64 {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
