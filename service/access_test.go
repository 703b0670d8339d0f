package service

import (
	"context"
	"errors"
	"testing"
)

type grantsFunc func(ctx context.Context, userID ID, kbIDs []ID) ([]KBGrant, error)

func (f grantsFunc) KnowledgeBaseGrants(ctx context.Context, userID ID, kbIDs []ID) ([]KBGrant, error) {
	return f(ctx, userID, kbIDs)
}

func TestAccessDecisions(t *testing.T) {
	grants := []KBGrant{
		{KnowledgeBaseID: 1, Visibility: VisibilityPrivate},                 // no grant
		{KnowledgeBaseID: 2, Visibility: VisibilityInternal},                // everyone reads
		{KnowledgeBaseID: 3, Visibility: VisibilityPrivate, Role: KBEditor}, // member
		{KnowledgeBaseID: 4, Visibility: VisibilityInternal, Role: KBManager},
	}
	a := NewAccess(grantsFunc(func(_ context.Context, _ ID, ids []ID) ([]KBGrant, error) {
		if ids == nil {
			return grants, nil
		}
		var out []KBGrant
		for _, g := range grants {
			for _, id := range ids {
				if g.KnowledgeBaseID == id {
					out = append(out, g)
				}
			}
		}
		return out, nil
	}))
	ctx := context.Background()
	user := Principal{UserID: 7, Role: RoleUser}
	admin := Principal{UserID: 8, Role: RoleAdmin}

	tests := []struct {
		name string
		p    Principal
		kb   ID
		need KBRole
		err  error
	}{
		{"private without grant is hidden", user, 1, KBViewer, ErrNotFound},
		{"internal reads", user, 2, KBViewer, nil},
		{"internal does not edit", user, 2, KBEditor, ErrForbidden},
		{"editor edits", user, 3, KBEditor, nil},
		{"editor does not manage", user, 3, KBManager, ErrForbidden},
		{"grant beats internal floor", user, 4, KBManager, nil},
		{"unknown is hidden", user, 99, KBViewer, ErrNotFound},
		{"admin manages a private knowledge base", admin, 1, KBManager, nil},
		{"admin still cannot see an unknown one", admin, 99, KBViewer, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Require(ctx, tt.p, tt.kb, tt.need)
			if (tt.err == nil) != (err == nil) || (tt.err != nil && !errors.Is(err, tt.err)) {
				t.Fatalf("Require = %v, want %v", err, tt.err)
			}
		})
	}
	readable, err := a.Readable(ctx, user)
	if err != nil || len(readable) != 3 || readable[0] != 2 || readable[1] != 3 || readable[2] != 4 {
		t.Fatalf("Readable = %v, %v; want [2 3 4]", readable, err)
	}
	if roles, err := a.Roles(ctx, user, []ID{}); err != nil || len(roles) != 0 {
		t.Fatalf("Roles of no ids = %v, %v; want none (not all)", roles, err)
	}
}
