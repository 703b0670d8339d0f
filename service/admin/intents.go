package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// MaxIntentDepth is the deepest level of the intent tree (roots are level 1):
// "IT support > VPN > Mac client" is as deep as routing needs.
const MaxIntentDepth = 3

// IntentStore keeps the intent tree. Each write runs its check (or plan)
// inside the writing transaction against every node read under a tree-wide
// lock, so concurrent edits cannot together break the tree's invariants.
type IntentStore interface {
	CreateIntent(ctx context.Context, n *service.IntentNode, check func(nodes []*service.IntentNode) error) error
	UpdateIntent(ctx context.Context, n *service.IntentNode, check func(nodes []*service.IntentNode) error) error
	DeleteIntents(ctx context.Context, plan func(nodes []*service.IntentNode) ([]service.ID, error)) error
	LiveKnowledgeBaseIDs(ctx context.Context, ids []service.ID) ([]service.ID, error)
}

// IntentReader reads the whole tree: roots with their children and paths.
// The cache satisfies it (falling back to Postgres), and so does the store.
type IntentReader interface {
	IntentTree(ctx context.Context) ([]*service.IntentNode, error)
}

// Invalidator drops a cached copy of admin data after a write has committed.
type Invalidator interface {
	Invalidate(ctx context.Context) error
}

// Intents manages the intent tree that routes questions to knowledge bases.
type Intents struct {
	store IntentStore
	read  IntentReader
	ids   service.IDGenerator
	audit *service.Auditor
	cached
}

// NewIntents returns the intent-tree use case. read serves the tree (usually
// the cache); cache is invalidated after every committed write; every
// change is recorded in audit.
func NewIntents(store IntentStore, read IntentReader, cache Invalidator, ids service.IDGenerator, audit *service.Auditor, cfg Config) *Intents {
	return &Intents{store: store, read: read, ids: ids, audit: audit, cached: newCached(cache, "intent tree", cfg)}
}

// IntentInput is a whole intent node as an admin submits it (PUT replaces
// every field). ParentID zero (or null) makes a root; Enabled defaults to
// true when omitted.
type IntentInput struct {
	ParentID         service.ID         `json:"parentId"`
	Code             string             `json:"code"`
	Name             string             `json:"name"`
	Description      string             `json:"description"`
	Examples         []string           `json:"examples"`
	Kind             service.IntentKind `json:"kind"`
	KnowledgeBaseIDs []service.ID       `json:"knowledgeBaseIds"`
	PromptTemplate   string             `json:"promptTemplate"`
	Enabled          *bool              `json:"enabled"`
	Sort             int                `json:"sort"`
}

var codePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// node validates the fields that need no other data and returns the node
// they describe.
func (in IntentInput) node(id service.ID) (*service.IntentNode, error) {
	n := &service.IntentNode{
		ID: id, ParentID: in.ParentID, Code: strings.TrimSpace(in.Code), Name: strings.TrimSpace(in.Name),
		Description: strings.TrimSpace(in.Description), Kind: in.Kind, PromptTemplate: strings.TrimSpace(in.PromptTemplate),
		Enabled: in.Enabled == nil || *in.Enabled, Sort: in.Sort, Examples: []string{}, KnowledgeBaseIDs: []service.ID{},
	}
	if !codePattern.MatchString(n.Code) {
		return nil, service.Errorf(service.ErrInvalid,
			"code must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if err := requireText("name", n.Name, service.MaxNameRunes); err != nil {
		return nil, err
	}
	if strings.Contains(n.Name, service.IntentPathSeparator) {
		return nil, service.Errorf(service.ErrInvalid, "name must not contain %q, which separates path levels", service.IntentPathSeparator)
	}
	if err := limitText("description", n.Description, service.MaxDescriptionRunes); err != nil {
		return nil, err
	}
	if err := limitText("promptTemplate", n.PromptTemplate, 8000); err != nil {
		return nil, err
	}
	if n.Sort < -1_000_000 || n.Sort > 1_000_000 {
		return nil, service.Errorf(service.ErrInvalid, "sort must be between -1000000 and 1000000")
	}
	for _, e := range in.Examples {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if utf8.RuneCountInString(e) > 500 {
			return nil, service.Errorf(service.ErrInvalid, "each example must be at most 500 characters")
		}
		n.Examples = append(n.Examples, e)
	}
	if len(n.Examples) > 50 {
		return nil, service.Errorf(service.ErrInvalid, "at most 50 examples")
	}
	if !n.Kind.Valid() {
		return nil, service.Errorf(service.ErrInvalid, "kind must be %q or %q", service.IntentKB, service.IntentSystem)
	}
	seen := map[service.ID]bool{}
	for _, id := range in.KnowledgeBaseIDs {
		if id <= 0 {
			return nil, service.Errorf(service.ErrInvalid, "knowledgeBaseIds holds an invalid id")
		}
		if !seen[id] {
			seen[id] = true
			n.KnowledgeBaseIDs = append(n.KnowledgeBaseIDs, id)
		}
	}
	// Every kb node names its knowledge bases, parents included: a parent is
	// matched when a question fits the category but none of its children, and
	// it becomes a leaf when its children are deleted. A system node answers
	// without retrieval, so knowledge bases on it would be silently ignored.
	switch {
	case n.Kind == service.IntentKB && len(n.KnowledgeBaseIDs) == 0:
		return nil, service.Errorf(service.ErrInvalid, "a kb intent needs at least one knowledge base")
	case n.Kind == service.IntentSystem && len(n.KnowledgeBaseIDs) > 0:
		return nil, service.Errorf(service.ErrInvalid, "a system intent answers without retrieval; remove its knowledge bases")
	case len(n.KnowledgeBaseIDs) > 20:
		return nil, service.Errorf(service.ErrInvalid, "at most 20 knowledge bases per intent")
	}
	return n, nil
}

// checkKnowledgeBases reports the first of ids that names no live knowledge base.
func (s *Intents) checkKnowledgeBases(ctx context.Context, ids []service.ID) error {
	live, err := s.store.LiveKnowledgeBaseIDs(ctx, ids)
	if err != nil {
		return err
	}
	found := make(map[service.ID]bool, len(live))
	for _, id := range live {
		found[id] = true
	}
	for _, id := range ids {
		if !found[id] {
			return service.WithDetails(service.ErrInvalid, fmt.Sprintf("knowledge base %s does not exist", id),
				map[string]string{"knowledgeBaseId": id.String()})
		}
	}
	return nil
}

// placement checks n against the tree it joins or moves in (nodes, which
// may hold n's old version) and sets n.Path: the code is free, the parent
// exists and is not n or below it, and the result is at most MaxIntentDepth
// deep.
func placement(n *service.IntentNode, nodes []*service.IntentNode) error {
	byID := make(map[service.ID]*service.IntentNode, len(nodes))
	children := make(map[service.ID][]service.ID)
	for _, x := range nodes {
		byID[x.ID] = x
		if x.ParentID != 0 {
			children[x.ParentID] = append(children[x.ParentID], x.ID)
		}
		if x.ID != n.ID && strings.EqualFold(x.Code, n.Code) {
			return service.WithDetails(service.ErrConflict, fmt.Sprintf("intent code %q is taken", n.Code),
				map[string]string{"intentId": x.ID.String()})
		}
	}
	// Height of n's subtree (1 for a leaf), counting its existing children.
	var height func(id service.ID, guard int) int
	height = func(id service.ID, guard int) int {
		h := 1
		if guard > len(nodes) {
			return h
		}
		for _, c := range children[id] {
			h = max(h, 1+height(c, guard+1))
		}
		return h
	}
	depth, path := 0, []string{n.Name}
	for p := n.ParentID; p != 0; {
		if p == n.ID {
			return service.Errorf(service.ErrInvalid, "an intent cannot be moved under itself or its descendants")
		}
		parent, ok := byID[p]
		if !ok {
			return service.WithDetails(service.ErrInvalid, fmt.Sprintf("parent intent %s does not exist", p),
				map[string]string{"parentId": p.String()})
		}
		depth++
		if depth > len(nodes) {
			return service.Errorf(service.ErrInvalid, "the intent tree holds a cycle above this node")
		}
		path = append([]string{parent.Name}, path...)
		p = parent.ParentID
	}
	if depth+height(n.ID, 0) > MaxIntentDepth {
		return service.Errorf(service.ErrInvalid, "the intent tree is at most %d levels deep; this would make it %d",
			MaxIntentDepth, depth+height(n.ID, 0))
	}
	n.Path = strings.Join(path, service.IntentPathSeparator)
	return nil
}

// Tree returns the whole tree: roots with their children, every node with
// its path. Disabled nodes are included (the admin UI shows them).
func (s *Intents) Tree(ctx context.Context) ([]*service.IntentNode, error) {
	return s.read.IntentTree(ctx)
}

// Create adds a node.
func (s *Intents) Create(ctx context.Context, in IntentInput) (*service.IntentNode, error) {
	n, err := service.AuditDo(ctx, s.audit, service.AuditEvent{Action: service.AuditIntentCreate, TargetType: service.TargetIntent, Detail: "code=" + in.Code},
		func(ctx context.Context, ev *service.AuditEvent) (*service.IntentNode, error) {
			n, err := s.create(ctx, in)
			if err == nil {
				ev.TargetID, ev.Detail = n.ID.String(), "code="+n.Code
			}
			return n, err
		})
	if err != nil {
		return nil, err
	}
	s.invalidate(ctx)
	return n, nil
}

func (s *Intents) create(ctx context.Context, in IntentInput) (*service.IntentNode, error) {
	id, err := s.ids.NextID()
	if err != nil {
		return nil, err
	}
	n, err := in.node(id)
	if err != nil {
		return nil, err
	}
	if err := s.checkKnowledgeBases(ctx, n.KnowledgeBaseIDs); err != nil {
		return nil, err
	}
	err = s.store.CreateIntent(ctx, n, func(nodes []*service.IntentNode) error { return placement(n, nodes) })
	if err != nil {
		return nil, s.codeConflict(err, n.Code)
	}
	return n, nil
}

// Update replaces a node; changing ParentID moves it (with its subtree) and
// Enabled enables or disables it.
func (s *Intents) Update(ctx context.Context, id service.ID, in IntentInput) (*service.IntentNode, error) {
	ev := service.AuditEvent{Action: service.AuditIntentUpdate, TargetType: service.TargetIntent, TargetID: id.String(), Detail: "code=" + in.Code}
	n, err := service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, _ *service.AuditEvent) (*service.IntentNode, error) {
		return s.update(ctx, id, in)
	})
	if err != nil {
		return nil, err
	}
	s.invalidate(ctx)
	return n, nil
}

func (s *Intents) update(ctx context.Context, id service.ID, in IntentInput) (*service.IntentNode, error) {
	n, err := in.node(id)
	if err != nil {
		return nil, err
	}
	if err := s.checkKnowledgeBases(ctx, n.KnowledgeBaseIDs); err != nil {
		return nil, err
	}
	err = s.store.UpdateIntent(ctx, n, func(nodes []*service.IntentNode) error {
		for _, x := range nodes {
			if x.ID == id {
				n.CreatedAt = x.CreatedAt
				return placement(n, nodes)
			}
		}
		return service.Errorf(service.ErrNotFound, "intent %s does not exist", id)
	})
	if err != nil {
		return nil, s.codeConflict(err, n.Code)
	}
	return n, nil
}

// Delete removes a node. A node with children is deleted only with cascade,
// and then with its whole subtree.
func (s *Intents) Delete(ctx context.Context, id service.ID, cascade bool) error {
	ev := service.AuditEvent{Action: service.AuditIntentDelete, TargetType: service.TargetIntent, TargetID: id.String()}
	if cascade {
		ev.Detail = "cascade"
	}
	err := s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		deleted, err := s.delete(ctx, id, cascade)
		if len(deleted) > 1 {
			ev.Detail = fmt.Sprintf("cascade: %d nodes", len(deleted))
		}
		return err
	})
	if err != nil {
		return err
	}
	s.invalidate(ctx)
	return nil
}

func (s *Intents) delete(ctx context.Context, id service.ID, cascade bool) (deleted []service.ID, err error) {
	err = s.store.DeleteIntents(ctx, func(nodes []*service.IntentNode) ([]service.ID, error) {
		children := make(map[service.ID][]service.ID)
		found := false
		for _, x := range nodes {
			found = found || x.ID == id
			if x.ParentID != 0 {
				children[x.ParentID] = append(children[x.ParentID], x.ID)
			}
		}
		if !found {
			return nil, service.Errorf(service.ErrNotFound, "intent %s does not exist", id)
		}
		if n := len(children[id]); n > 0 && !cascade {
			return nil, service.Errorf(service.ErrConflict,
				"the intent has %d child nodes; delete them first or pass cascade=true to delete the subtree", n)
		}
		ids := []service.ID{id}
		for i := 0; i < len(ids) && i <= len(nodes); i++ {
			ids = append(ids, children[ids[i]]...)
		}
		deleted = ids
		return ids, nil
	})
	return deleted, err
}

// codeConflict gives the database's unique-code verdict (the last line
// behind placement's check) a clear message.
func (s *Intents) codeConflict(err error, code string) error {
	var de *service.Error
	if errors.Is(err, service.ErrConflict) && !errors.As(err, &de) {
		return service.Errorf(service.ErrConflict, "intent code %q is taken", code)
	}
	return err
}
