package repository

import (
	"context"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// Upgrading a database that has knowledge bases keeps them readable by
// everyone ('internal'); knowledge bases created afterwards default to
// 'private'.
func TestKnowledgeBaseAccessMigrationKeepsExistingInternal(t *testing.T) {
	s := upgraded(t, "0004", `INSERT INTO knowledge_bases (id, name, embedding_model, embedding_dim) VALUES (1, 'old', 'm', 512)`)
	ctx := context.Background()
	if err := s.db.Exec(`INSERT INTO knowledge_bases (id, name, embedding_model, embedding_dim) VALUES (2, 'new', 'm', 512)`).Error; err != nil {
		t.Fatal(err)
	}
	grants, err := s.KnowledgeBaseGrants(ctx, 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 2 || grants[0].Visibility != service.VisibilityInternal || grants[1].Visibility != service.VisibilityPrivate {
		t.Fatalf("grants after the upgrade: %+v, want 1 internal and 2 private", grants)
	}
}

// KnowledgeBaseGrants reports the highest of a user's direct and group
// grants, and only for live knowledge bases.
func TestKnowledgeBaseGrantsHighestOfDirectAndGroup(t *testing.T) {
	s := migratedStore(t)
	ctx := context.Background()
	must := fatalOn(t)
	must(s.CreateUser(ctx, &service.User{ID: 10, Username: "u", PasswordHash: "x", Role: service.RoleUser}))
	for _, id := range []service.ID{1, 2, 3} {
		must(s.CreateKnowledgeBase(ctx, &service.KnowledgeBase{ID: id, Name: "kb" + id.String(), EmbeddingModel: "m", EmbeddingDim: 512, ChunkSize: 512}))
	}
	must(s.CreateGroup(ctx, &service.Group{ID: 20, Name: "g"}))
	must(s.AddGroupMember(ctx, 20, 10))
	put := func(id, kb service.ID, kind service.MemberKind, who service.ID, role service.KBRole) {
		_, err := s.PutKnowledgeBaseMember(ctx, &service.KBMember{ID: id, KnowledgeBaseID: kb, Kind: kind, PrincipalID: who, Role: role})
		must(err)
	}
	put(100, 1, service.MemberUser, 10, service.KBViewer)
	put(101, 1, service.MemberGroup, 20, service.KBManager)
	put(102, 2, service.MemberUser, 10, service.KBEditor)
	put(103, 2, service.MemberGroup, 20, service.KBViewer)
	put(104, 3, service.MemberGroup, 99, service.KBManager) // another group
	must(s.DeleteKnowledgeBase(ctx, 2))

	grants, err := s.KnowledgeBaseGrants(ctx, 10, nil)
	must(err)
	got := map[service.ID]service.KBRole{}
	for _, g := range grants {
		got[g.KnowledgeBaseID] = g.Role
	}
	if len(got) != 2 || got[1] != service.KBManager || got[3] != "" {
		t.Fatalf("grants %v, want kb1 manager (group beats direct viewer), kb3 none, kb2 gone", got)
	}
}
