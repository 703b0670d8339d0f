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

// BuildIntentTree links a flat list of nodes into a forest: it sets each
// node's Children (ordered by Sort, then ID) and Path, and returns the roots
// in the same order. It works in place on the given nodes. A node whose
// parent is missing becomes a root; a cycle (which validation prevents) is
// cut so the result can always be walked and encoded.
func BuildIntentTree(nodes []*IntentNode) []*IntentNode {
	byID := make(map[ID]*IntentNode, len(nodes))
	for _, n := range nodes {
		n.Children = nil
		byID[n.ID] = n
	}
	less := func(a, b *IntentNode) bool {
		if a.Sort != b.Sort {
			return a.Sort < b.Sort
		}
		return a.ID < b.ID
	}
	children := make(map[ID][]*IntentNode, len(nodes))
	var roots []*IntentNode
	for _, n := range nodes {
		if _, ok := byID[n.ParentID]; ok && n.ParentID != n.ID {
			children[n.ParentID] = append(children[n.ParentID], n)
		} else {
			roots = append(roots, n)
		}
	}
	seen := make(map[ID]bool, len(nodes))
	var link func(n *IntentNode, parentPath string)
	link = func(n *IntentNode, parentPath string) {
		seen[n.ID] = true
		n.Path = n.Name
		if parentPath != "" {
			n.Path = parentPath + IntentPathSeparator + n.Name
		}
		kids := children[n.ID]
		sort.SliceStable(kids, func(i, j int) bool { return less(kids[i], kids[j]) })
		for _, k := range kids {
			if !seen[k.ID] {
				n.Children = append(n.Children, k)
				link(k, n.Path)
			}
		}
	}
	sort.SliceStable(roots, func(i, j int) bool { return less(roots[i], roots[j]) })
	for _, r := range roots {
		link(r, "")
	}
	// Nodes not reached from a root sit on a cycle: cut it at its smallest node.
	for _, n := range nodes {
		if !seen[n.ID] {
			roots = append(roots, n)
			link(n, "")
		}
	}
	if roots == nil {
		roots = []*IntentNode{}
	}
	return roots
}

// IntentPathSeparator joins the names on a node's path.
const IntentPathSeparator = SectionSeparator

// ApplyTermMappings rewrites q with the enabled mappings, scanning left to
// right. At each position the longest matching source term wins (higher
// priority, then the smaller source term and id break ties, so the result
// never depends on the order of mappings); replaced text is never scanned
// again, so a target containing another source term is not rewritten twice.
//
// ASCII letters match case-insensitively ("k8s" matches "K8S"), and a source
// term that begins or ends with an ASCII letter or digit only matches at a
// word boundary on that side, so "AD" rewrites "AD" but not "LOAD". Chinese
// and other scripts without spaces match anywhere.
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
		a, b := active[i], active[j]
		switch {
		case len(a.SourceTerm) != len(b.SourceTerm):
			return len(a.SourceTerm) > len(b.SourceTerm)
		case a.Priority != b.Priority:
			return a.Priority > b.Priority
		case a.SourceTerm != b.SourceTerm:
			return a.SourceTerm < b.SourceTerm
		}
		return a.ID < b.ID
	})
	// Candidates by their (case-folded) first byte keep the scan cheap with
	// many mappings.
	byFirst := make(map[byte][]TermMapping)
	for _, m := range active {
		c := lowerASCII(m.SourceTerm[0])
		byFirst[c] = append(byFirst[c], m)
	}
	var b strings.Builder
	b.Grow(len(q))
	for i := 0; i < len(q); {
		matched := false
		for _, m := range byFirst[lowerASCII(q[i])] {
			end := i + len(m.SourceTerm)
			if end <= len(q) && foldEqualASCII(q[i:end], m.SourceTerm) && atBoundaries(q, i, end) {
				b.WriteString(m.TargetTerm)
				i = end
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		// Copy one whole UTF-8 sequence so matching never starts mid-rune.
		n := 1
		for i+n < len(q) && q[i+n]&0xC0 == 0x80 {
			n++
		}
		b.WriteString(q[i : i+n])
		i += n
	}
	return b.String()
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isWordASCII(c byte) bool {
	c = lowerASCII(c)
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_'
}

// foldEqualASCII compares byte strings, folding ASCII letters only. ASCII
// bytes never occur inside a multi-byte UTF-8 sequence, so this is safe on
// any UTF-8 text.
func foldEqualASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

// atBoundaries reports whether q[i:end] does not cut through an ASCII word:
// a match that starts (ends) with a word character must not have one just
// before (after) it.
func atBoundaries(q string, i, end int) bool {
	if isWordASCII(q[i]) && i > 0 && isWordASCII(q[i-1]) {
		return false
	}
	if isWordASCII(q[end-1]) && end < len(q) && isWordASCII(q[end]) {
		return false
	}
	return true
}
