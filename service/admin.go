package service

import (
	"sort"
	"strings"
	"time"
)

// IntentKind says how a matched intent is answered.
type IntentKind string

const (
	IntentKB     IntentKind = "kb"     // retrieve from the node's knowledge bases
	IntentSystem IntentKind = "system" // answer as plain chat, no retrieval
)

// Valid reports whether k is a known kind.
func (k IntentKind) Valid() bool { return k == IntentKB || k == IntentSystem }

// IntentNode is a node of the intent tree that routes questions.
type IntentNode struct {
	ID               ID            `json:"id"`
	ParentID         ID            `json:"parentId,omitempty"`
	Code             string        `json:"code"`
	Name             string        `json:"name"`
	Description      string        `json:"description"`
	Examples         []string      `json:"examples"`
	Kind             IntentKind    `json:"kind"`
	KnowledgeBaseIDs []ID          `json:"knowledgeBaseIds"`
	PromptTemplate   string        `json:"promptTemplate"`
	Enabled          bool          `json:"enabled"`
	Sort             int           `json:"sort"`
	Path             string        `json:"path"` // "IT support > VPN"
	Children         []*IntentNode `json:"children,omitempty"`
	CreatedAt        time.Time     `json:"createdAt"`
	UpdatedAt        time.Time     `json:"updatedAt"`
}

// TermMapping rewrites jargon in questions: SourceTerm → TargetTerm.
type TermMapping struct {
	ID         ID        `json:"id"`
	SourceTerm string    `json:"sourceTerm"`
	TargetTerm string    `json:"targetTerm"`
	Priority   int       `json:"priority"`
	Enabled    bool      `json:"enabled"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// ApplyTermMappings rewrites q with the enabled mappings. At each position the
// longest matching source term wins (higher priority breaks ties); replaced
// text is never scanned again, so a target containing another source term is
// not rewritten twice.
func ApplyTermMappings(q string, mappings []TermMapping) string {
	active := make([]TermMapping, 0, len(mappings))
	for _, m := range mappings {
		if m.Enabled && m.SourceTerm != "" {
			active = append(active, m)
		}
	}
	if len(active) == 0 {
		return q
	}
	sort.SliceStable(active, func(i, j int) bool {
		if len(active[i].SourceTerm) != len(active[j].SourceTerm) {
			return len(active[i].SourceTerm) > len(active[j].SourceTerm)
		}
		return active[i].Priority > active[j].Priority
	})
	var b strings.Builder
	for i := 0; i < len(q); {
		matched := false
		for _, m := range active {
			if strings.HasPrefix(q[i:], m.SourceTerm) {
				b.WriteString(m.TargetTerm)
				i += len(m.SourceTerm)
				matched = true
				break
			}
		}
		if !matched {
			// Copy one whole UTF-8 sequence so matching never starts mid-rune.
			n := 1
			for i+n < len(q) && q[i+n]&0xC0 == 0x80 {
				n++
			}
			b.WriteString(q[i : i+n])
			i += n
		}
	}
	return b.String()
}
