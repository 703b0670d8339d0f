package service

import (
	"context"
	"time"
)

// Visibility says who may read a knowledge base besides its members.
type Visibility string

const (
	// VisibilityPrivate: members only (the default for new knowledge bases).
	VisibilityPrivate Visibility = "private"
	// VisibilityInternal: every logged-in user may read (search and chat).
	VisibilityInternal Visibility = "internal"
)

// Valid reports whether v is a known visibility.
func (v Visibility) Valid() bool { return v == VisibilityPrivate || v == VisibilityInternal }

// KBRole is what a member may do with a knowledge base. Roles are ordered:
// each includes the ones before it.
type KBRole string

const (
	KBViewer  KBRole = "viewer"  // search and chat over it, read its documents
	KBEditor  KBRole = "editor"  // + upload, reindex, delete documents
	KBManager KBRole = "manager" // + settings, members, delete the knowledge base
)

func (r KBRole) rank() int {
	switch r {
	case KBViewer:
		return 1
	case KBEditor:
		return 2
	case KBManager:
		return 3
	}
	return 0
}

// Valid reports whether r is a known role.
func (r KBRole) Valid() bool { return r.rank() > 0 }

// AtLeast reports whether r includes need.
func (r KBRole) AtLeast(need KBRole) bool { return r.Valid() && r.rank() >= need.rank() }

// MemberKind tells a user grant from a group grant.
type MemberKind string

const (
	MemberUser  MemberKind = "user"
	MemberGroup MemberKind = "group"
)

// Valid reports whether k is a known kind.
func (k MemberKind) Valid() bool { return k == MemberUser || k == MemberGroup }

// Group is an admin-managed set of users that knowledge bases are shared with.
type Group struct {
	ID          ID     `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	MemberCount int    `json:"memberCount"`
	// ManagedBy is "oidc" for a group the identity provider's groups claim
	// manages: its members follow the provider and admins cannot edit it.
	ManagedBy string    `json:"managedBy,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// KBMember grants a user or a group a role on a knowledge base.
type KBMember struct {
	ID              ID         `json:"id"`
	KnowledgeBaseID ID         `json:"knowledgeBaseId"`
	Kind            MemberKind `json:"kind"`
	PrincipalID     ID         `json:"principalId"`
	Name            string     `json:"name"` // the username or group name
	Role            KBRole     `json:"role"`
	CreatedAt       time.Time  `json:"createdAt"`
	UpdatedAt       time.Time  `json:"updatedAt"`
}

// KBGrant is a user's standing on one live knowledge base as storage knows
// it: the knowledge base's visibility and the highest role granted to the
// user directly or through any of their groups ("" when none).
type KBGrant struct {
	KnowledgeBaseID ID
	Visibility      Visibility
	Role            KBRole
}

// AccessStore reads grants. kbIDs nil means every live knowledge base;
// deleted or unknown ids are simply absent from the answer.
type AccessStore interface {
	KnowledgeBaseGrants(ctx context.Context, userID ID, kbIDs []ID) ([]KBGrant, error)
}

// Access decides what a principal may do with knowledge bases. It is the one
// place every feature (admin, ingest, retrieve, chat) asks, so the rule
// lives here and nowhere else: admins manage everything; others have the
// highest of their direct and group grants, and at least viewer on internal
// knowledge bases. A knowledge base the caller cannot read does not exist
// for them (service.ErrNotFound); one they read but may not change is
// service.ErrForbidden.
type Access struct {
	store AccessStore
}

// NewAccess returns the access resolver.
func NewAccess(store AccessStore) *Access { return &Access{store: store} }

// effective is the principal's role from a grant. An API key narrows its
// owner: a knowledge base outside its list does not exist for it, and its
// role is capped by its scopes (editor with ingest, else viewer), so a key
// never manages a knowledge base even when its owner does.
func effective(p Principal, g KBGrant) KBRole {
	role := g.Role
	switch {
	case p.IsAdmin():
		role = KBManager
	case g.Role == "" && g.Visibility == VisibilityInternal:
		role = KBViewer
	}
	if p.Key == nil || !role.Valid() {
		return role
	}
	if !p.Key.allows(g.KnowledgeBaseID) {
		return ""
	}
	limit := KBViewer
	if p.Key.HasScope(ScopeIngest) {
		limit = KBEditor
	}
	if role.AtLeast(limit) {
		return limit
	}
	return role
}

// Roles returns p's effective role on each knowledge base of ids (every
// live one when ids is nil) that p may read; the others are absent.
func (a *Access) Roles(ctx context.Context, p Principal, ids []ID) (map[ID]KBRole, error) {
	if ids != nil && len(ids) == 0 {
		return map[ID]KBRole{}, nil
	}
	grants, err := a.store.KnowledgeBaseGrants(ctx, p.UserID, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[ID]KBRole, len(grants))
	for _, g := range grants {
		if r := effective(p, g); r.Valid() {
			out[g.KnowledgeBaseID] = r
		}
	}
	return out, nil
}

// Readable returns the ids of every knowledge base p may read, in id order.
func (a *Access) Readable(ctx context.Context, p Principal) ([]ID, error) {
	grants, err := a.store.KnowledgeBaseGrants(ctx, p.UserID, nil)
	if err != nil {
		return nil, err
	}
	out := make([]ID, 0, len(grants))
	for _, g := range grants {
		if effective(p, g).Valid() {
			out = append(out, g.KnowledgeBaseID)
		}
	}
	return out, nil
}

// Role returns p's effective role on one knowledge base; one p cannot read
// (or that does not exist) is service.ErrNotFound.
func (a *Access) Role(ctx context.Context, p Principal, id ID) (KBRole, error) {
	roles, err := a.Roles(ctx, p, []ID{id})
	if err != nil {
		return "", err
	}
	r, ok := roles[id]
	if !ok {
		return "", Errorf(ErrNotFound, "knowledge base %s not found", id)
	}
	return r, nil
}

// Require checks that p holds at least need on a knowledge base and returns
// p's role: service.ErrNotFound when p cannot read it, service.ErrForbidden
// when p reads it with a lesser role.
func (a *Access) Require(ctx context.Context, p Principal, id ID, need KBRole) (KBRole, error) {
	r, err := a.Role(ctx, p, id)
	if err != nil {
		return "", err
	}
	if !r.AtLeast(need) {
		return r, Errorf(ErrForbidden, "this needs the %s role on knowledge base %s (you are %s)", need, id, r)
	}
	return r, nil
}

// CheckReadable fails with service.ErrNotFound, naming the first of ids p
// cannot read, unless p reads every one of them: a knowledge base p may not
// read is reported like one that does not exist. No ids is no check.
func (a *Access) CheckReadable(ctx context.Context, p Principal, ids []ID) error {
	if len(ids) == 0 {
		return nil
	}
	roles, err := a.Roles(ctx, p, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := roles[id]; !ok {
			return Errorf(ErrNotFound, "knowledge base %s not found", id)
		}
	}
	return nil
}

// SystemPrincipal acts for ragent itself in first-start work (the demo
// data, `ragent eval`), where no user is logged in: an admin with no user id.
func SystemPrincipal() Principal { return Principal{Username: "system", Role: RoleAdmin} }
