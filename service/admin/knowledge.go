package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// KnowledgeBaseStore keeps knowledge bases.
type KnowledgeBaseStore interface {
	CreateKnowledgeBase(ctx context.Context, kb *service.KnowledgeBase) error
	KnowledgeBase(ctx context.Context, id service.ID) (*service.KnowledgeBase, error)
	KnowledgeBases(ctx context.Context, after service.ID, limit int) ([]*service.KnowledgeBase, error)
	KnowledgeBasesIn(ctx context.Context, ids []service.ID, after service.ID, limit int) ([]*service.KnowledgeBase, error)
	// UpdateKnowledgeBase stores kb; its name must not be another live
	// knowledge base's among nameAmong (all when nil): service.ErrConflict.
	UpdateKnowledgeBase(ctx context.Context, kb *service.KnowledgeBase, nameAmong []service.ID) error
	DeleteKnowledgeBase(ctx context.Context, id service.ID) error

	KnowledgeBaseMembers(ctx context.Context, kbID service.ID) ([]*service.KBMember, error)
	PutKnowledgeBaseMember(ctx context.Context, m *service.KBMember) (created bool, err error)
	DeleteKnowledgeBaseMember(ctx context.Context, kbID, id service.ID) error
	UserByID(ctx context.Context, id service.ID) (*service.User, error)
	UserByUsername(ctx context.Context, username string) (*service.User, error)
	Group(ctx context.Context, id service.ID) (*service.Group, error)
	GroupByName(ctx context.Context, name string) (*service.Group, error)
}

// EmbeddingDefaults describe the embedder new knowledge bases are built with.
type EmbeddingDefaults struct {
	Space        service.EmbeddingSpace // recorded as the knowledge base's own
	VectorWeight float64                // hybrid weight of the vector list (keyword weighs 1)
}

// KnowledgeBases manages knowledge bases and their members. Every method
// takes the caller and asks access first: admins create knowledge bases;
// viewers read one, managers change it, its members and delete it.
type KnowledgeBases struct {
	store  KnowledgeBaseStore
	access *service.Access
	ids    service.IDGenerator
	emb    EmbeddingDefaults
	audit  *service.Auditor
}

// NewKnowledgeBases returns the knowledge-base use case; every change is
// recorded in audit.
func NewKnowledgeBases(store KnowledgeBaseStore, access *service.Access, ids service.IDGenerator, emb EmbeddingDefaults, audit *service.Auditor) *KnowledgeBases {
	return &KnowledgeBases{store: store, access: access, ids: ids, emb: emb, audit: audit}
}

// KnowledgeBaseInput creates or changes a knowledge base; nil fields keep
// their value (or the default on create).
type KnowledgeBaseInput struct {
	Name         *string  `json:"name"`
	Description  *string  `json:"description"`
	ChunkSize    *int     `json:"chunkSize"`
	ChunkOverlap *int     `json:"chunkOverlap"`
	VectorWeight *float64 `json:"vectorWeight"`
	// Visibility defaults to private on create.
	Visibility *service.Visibility `json:"visibility"`
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
	if in.Visibility != nil {
		kb.Visibility = *in.Visibility
	}
	if !kb.Visibility.Valid() {
		return service.Errorf(service.ErrInvalid, "visibility must be %q or %q", service.VisibilityPrivate, service.VisibilityInternal)
	}
	if err := checkNamed(kb.Name, kb.Description); err != nil {
		return err
	}
	if kb.ChunkSize < service.MinChunkSize || kb.ChunkSize > service.MaxChunkSize {
		return service.Errorf(service.ErrInvalid, "chunkSize must be between %d and %d tokens", service.MinChunkSize, service.MaxChunkSize)
	}
	if kb.ChunkOverlap < 0 || kb.ChunkOverlap >= kb.ChunkSize/2 {
		return service.Errorf(service.ErrInvalid, "chunkOverlap must be between 0 and half of chunkSize")
	}
	if kb.VectorWeight < 0 || kb.VectorWeight > 10 {
		return service.Errorf(service.ErrInvalid, "vectorWeight must be between 0 and 10")
	}
	return nil
}

// Create adds a knowledge base embedded with the configured model. Only
// admins create knowledge bases (and then grant managers): a knowledge base
// costs storage and embedding work, so creating one is an operator's call.
func (k *KnowledgeBases) Create(ctx context.Context, p service.Principal, in KnowledgeBaseInput) (*service.KnowledgeBase, error) {
	return service.AuditDo(ctx, k.audit, service.AuditEvent{Action: service.AuditKBCreate, TargetType: service.TargetKnowledgeBase},
		func(ctx context.Context, ev *service.AuditEvent) (*service.KnowledgeBase, error) {
			kb, err := k.create(ctx, p, in)
			if err == nil {
				ev.TargetID, ev.Detail = kb.ID.String(), fmt.Sprintf("name=%s visibility=%s", kb.Name, kb.Visibility)
			}
			return kb, err
		})
}

func (k *KnowledgeBases) create(ctx context.Context, p service.Principal, in KnowledgeBaseInput) (*service.KnowledgeBase, error) {
	if !p.IsAdmin() {
		return nil, service.Errorf(service.ErrForbidden, "only admins create knowledge bases")
	}
	kb := &service.KnowledgeBase{
		EmbeddingModel: k.emb.Space.Model, EmbeddingDim: k.emb.Space.Dim, VectorWeight: k.emb.VectorWeight,
		EmbeddingQueryPrefix: k.emb.Space.QueryPrefix, EmbeddingDocumentPrefix: k.emb.Space.DocumentPrefix,
		ChunkSize: 512, ChunkOverlap: 64, Visibility: service.VisibilityPrivate,
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
		return nil, nameTaken(err, "knowledge base", kb.Name)
	}
	kb.Role = service.KBManager
	return kb, nil
}

// Get returns one knowledge base the caller may read, with their role.
func (k *KnowledgeBases) Get(ctx context.Context, p service.Principal, id service.ID) (*service.KnowledgeBase, error) {
	role, err := k.access.Role(ctx, p, id)
	if err != nil {
		return nil, err
	}
	kb, err := k.store.KnowledgeBase(ctx, id)
	if err != nil {
		return nil, notFound(err, id)
	}
	kb.Role = role
	return kb, nil
}

// Require checks that p holds at least need on a knowledge base
// (service.Access.Require): for the HTTP layer, before it replays a stored
// answer of a change.
func (k *KnowledgeBases) Require(ctx context.Context, p service.Principal, id service.ID, need service.KBRole) error {
	_, err := k.access.Require(ctx, p, id, need)
	return err
}

// List pages through the knowledge bases the caller may read.
func (k *KnowledgeBases) List(ctx context.Context, p service.Principal, after service.ID, limit int) ([]*service.KnowledgeBase, error) {
	roles, err := k.access.Roles(ctx, p, nil)
	if err != nil {
		return nil, err
	}
	kbs, err := k.store.KnowledgeBasesIn(ctx, slices.Collect(maps.Keys(roles)), after, limit)
	if err != nil {
		return nil, err
	}
	for _, kb := range kbs {
		kb.Role = roles[kb.ID]
	}
	return kbs, nil
}

// Update changes a knowledge base (managers). Chunk settings apply to
// documents ingested or reindexed afterwards.
func (k *KnowledgeBases) Update(ctx context.Context, p service.Principal, id service.ID, in KnowledgeBaseInput) (*service.KnowledgeBase, error) {
	ev := service.AuditEvent{Action: service.AuditKBUpdate, TargetType: service.TargetKnowledgeBase, TargetID: id.String(), Detail: in.changes()}
	return service.AuditDo(ctx, k.audit, ev, func(ctx context.Context, _ *service.AuditEvent) (*service.KnowledgeBase, error) {
		return k.update(ctx, p, id, in)
	})
}

// changes names the fields in changes, with the new visibility, for the
// audit log.
func (in KnowledgeBaseInput) changes() string {
	var parts []string
	if in.Visibility != nil {
		parts = append(parts, "visibility="+string(*in.Visibility))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"name", in.Name != nil}, {"description", in.Description != nil}, {"chunkSize", in.ChunkSize != nil},
		{"chunkOverlap", in.ChunkOverlap != nil}, {"vectorWeight", in.VectorWeight != nil}} {
		if f.set {
			parts = append(parts, f.name)
		}
	}
	return strings.Join(parts, " ")
}

func (k *KnowledgeBases) update(ctx context.Context, p service.Principal, id service.ID, in KnowledgeBaseInput) (*service.KnowledgeBase, error) {
	role, err := k.access.Require(ctx, p, id, service.KBManager)
	if err != nil {
		return nil, err
	}
	kb, err := k.store.KnowledgeBase(ctx, id)
	if err != nil {
		return nil, notFound(err, id)
	}
	if err := in.apply(kb); err != nil {
		return nil, err
	}
	// A name is unique among what the caller reads: a conflict with a
	// knowledge base they cannot see would tell them it exists.
	var among []service.ID
	if !p.IsAdmin() {
		readable, err := k.access.Readable(ctx, p)
		if err != nil {
			return nil, err
		}
		among = readable
	}
	if err := k.store.UpdateKnowledgeBase(ctx, kb, among); err != nil {
		return nil, notFound(nameTaken(err, "knowledge base", kb.Name), id)
	}
	kb.Role = role
	return kb, nil
}

// Delete removes a knowledge base, its documents, their chunks and its
// members (managers).
func (k *KnowledgeBases) Delete(ctx context.Context, p service.Principal, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditKBDelete, TargetType: service.TargetKnowledgeBase, TargetID: id.String()}
	return k.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		if _, err := k.access.Require(ctx, p, id, service.KBManager); err != nil {
			return err
		}
		return notFound(k.store.DeleteKnowledgeBase(ctx, id), id)
	})
}

// nameTaken says which name the store's conflict is about: another what of
// that name exists. Other errors pass as they are.
func nameTaken(err error, what, name string) error {
	if errors.Is(err, service.ErrConflict) {
		return service.Errorf(service.ErrConflict, "a %s named %q exists", what, name)
	}
	return err
}

func notFound(err error, id service.ID) error {
	if errors.Is(err, service.ErrNotFound) {
		return service.Errorf(service.ErrNotFound, "knowledge base %s not found", id)
	}
	return err
}

// MemberInput grants a role to a user or a group, named by id or by name
// (so a manager who is not an admin can share without a user directory).
type MemberInput struct {
	Kind        service.MemberKind `json:"kind"`
	PrincipalID service.ID         `json:"principalId"`
	Name        string             `json:"name"`
	Role        service.KBRole     `json:"role"`
}

// Members lists a knowledge base's grants (managers).
func (k *KnowledgeBases) Members(ctx context.Context, p service.Principal, kbID service.ID) ([]*service.KBMember, error) {
	if _, err := k.access.Require(ctx, p, kbID, service.KBManager); err != nil {
		return nil, err
	}
	return k.store.KnowledgeBaseMembers(ctx, kbID)
}

// PutMember grants a role on a knowledge base, or changes the role of an
// existing grant of the same user or group (managers). created reports a
// new grant.
func (k *KnowledgeBases) PutMember(ctx context.Context, p service.Principal, kbID service.ID, in MemberInput) (*service.KBMember, bool, error) {
	var m *service.KBMember
	var created bool
	ev := service.AuditEvent{Action: service.AuditKBMemberPut, TargetType: service.TargetKnowledgeBase, TargetID: kbID.String(),
		Detail: fmt.Sprintf("%s=%s role=%s", in.Kind, memberName(in), in.Role)}
	err := k.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		var err error
		if m, created, err = k.putMember(ctx, p, kbID, in); err == nil {
			ev.Detail = fmt.Sprintf("%s=%s (%s) role=%s", m.Kind, m.PrincipalID, m.Name, m.Role)
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return m, created, nil
}

// memberName is how in names the member, for the audit log.
func memberName(in MemberInput) string {
	if in.PrincipalID != 0 {
		return in.PrincipalID.String()
	}
	return strings.TrimSpace(in.Name)
}

func (k *KnowledgeBases) putMember(ctx context.Context, p service.Principal, kbID service.ID, in MemberInput) (*service.KBMember, bool, error) {
	if _, err := k.access.Require(ctx, p, kbID, service.KBManager); err != nil {
		return nil, false, err
	}
	if !in.Role.Valid() {
		return nil, false, service.Errorf(service.ErrInvalid, "role must be viewer, editor or manager")
	}
	m := &service.KBMember{KnowledgeBaseID: kbID, Kind: in.Kind, Role: in.Role}
	name := strings.TrimSpace(in.Name)
	if in.PrincipalID == 0 && name == "" {
		return nil, false, service.Errorf(service.ErrInvalid, "principalId or name is required")
	}
	switch in.Kind {
	case service.MemberUser:
		u, err := byIDOrName(ctx, in.PrincipalID, name, "user", k.store.UserByID, k.store.UserByUsername)
		if err != nil {
			return nil, false, err
		}
		m.PrincipalID, m.Name = u.ID, u.Username
	case service.MemberGroup:
		g, err := byIDOrName(ctx, in.PrincipalID, name, "group", k.store.Group, k.store.GroupByName)
		if err != nil {
			return nil, false, err
		}
		m.PrincipalID, m.Name = g.ID, g.Name
	default:
		return nil, false, service.Errorf(service.ErrInvalid, "kind must be %q or %q", service.MemberUser, service.MemberGroup)
	}
	id, err := k.ids.NextID()
	if err != nil {
		return nil, false, err
	}
	m.ID = id
	created, err := k.store.PutKnowledgeBaseMember(ctx, m)
	if err != nil {
		return nil, false, err
	}
	return m, created, nil
}

// RemoveMember revokes one grant (managers). A manager may remove their own
// grant; an admin can always restore it.
func (k *KnowledgeBases) RemoveMember(ctx context.Context, p service.Principal, kbID, memberID service.ID) error {
	ev := service.AuditEvent{Action: service.AuditKBMemberRemove, TargetType: service.TargetKnowledgeBase, TargetID: kbID.String(),
		Detail: "member=" + memberID.String()}
	return k.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		if _, err := k.access.Require(ctx, p, kbID, service.KBManager); err != nil {
			return err
		}
		err := k.store.DeleteKnowledgeBaseMember(ctx, kbID, memberID)
		if errors.Is(err, service.ErrNotFound) {
			return service.Errorf(service.ErrNotFound, "member %s not found", memberID)
		}
		return err
	})
}
