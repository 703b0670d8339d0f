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
	// API keys: narrowed by scopes (role cap) and by their knowledge bases.
	readKey := Principal{UserID: 7, Role: RoleUser, Key: &KeyGrant{KeyID: 1, Scopes: []Scope{ScopeRead}}}
	ingestKey := Principal{UserID: 7, Role: RoleUser, Key: &KeyGrant{KeyID: 2, Scopes: []Scope{ScopeIngest}}}
	kb3Key := Principal{UserID: 7, Role: RoleUser, Key: &KeyGrant{KeyID: 3, Scopes: []Scope{ScopeIngest}, KnowledgeBaseIDs: []ID{3}}}
	adminKey := Principal{UserID: 8, Role: RoleAdmin, Key: &KeyGrant{KeyID: 4, Scopes: Scopes, KnowledgeBaseIDs: []ID{2}}}

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
		{"key without ingest reads", readKey, 3, KBViewer, nil},
		{"key without ingest does not edit", readKey, 3, KBEditor, ErrForbidden},
		{"key with ingest edits", ingestKey, 3, KBEditor, nil},
		{"key never manages", ingestKey, 4, KBManager, ErrForbidden},
		{"key cannot exceed its owner", ingestKey, 2, KBEditor, ErrForbidden},
		{"key sees no hidden knowledge base", ingestKey, 1, KBViewer, ErrNotFound},
		{"key reaches its knowledge base", kb3Key, 3, KBEditor, nil},
		{"key outside its list is hidden", kb3Key, 2, KBViewer, ErrNotFound},
		{"admin's key is limited to its list", adminKey, 1, KBViewer, ErrNotFound},
		{"admin's key does not manage", adminKey, 2, KBManager, ErrForbidden},
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
	if readable, err := a.Readable(ctx, kb3Key); err != nil || len(readable) != 1 || readable[0] != 3 {
		t.Fatalf("Readable(key limited to 3) = %v, %v; want [3]", readable, err)
	}
	if roles, err := a.Roles(ctx, user, []ID{}); err != nil || len(roles) != 0 {
		t.Fatalf("Roles of no ids = %v, %v; want none (not all)", roles, err)
	}
	for _, tt := range []struct {
		ids  []ID
		want string // "" for no error
	}{
		{nil, ""}, {[]ID{2, 3}, ""}, {[]ID{2, 1, 99}, "knowledge base 1 not found"}, {[]ID{99}, "knowledge base 99 not found"},
	} {
		err := a.CheckReadable(ctx, user, tt.ids)
		if tt.want == "" && err != nil || tt.want != "" && (!errors.Is(err, ErrNotFound) || err.Error() != tt.want) {
			t.Errorf("CheckReadable(%v) = %v, want %q", tt.ids, err, tt.want)
		}
	}
}

// KeyGrant.Within: an unlimited grant reads every turn; a limited one only
// turns that searched within its list — never one whose knowledge bases
// are unknown (nil); a turn that searched none ([]) is within any list.
func TestKeyGrantWithin(t *testing.T) {
	limited := &KeyGrant{KnowledgeBaseIDs: []ID{1, 2}}
	for _, tt := range []struct {
		g    *KeyGrant
		kbs  []ID
		want bool
	}{
		{nil, nil, true}, {&KeyGrant{}, []ID{9}, true}, {&KeyGrant{}, nil, true},
		{limited, []ID{1}, true}, {limited, []ID{2, 1}, true}, {limited, []ID{}, true},
		{limited, []ID{1, 3}, false}, {limited, nil, false},
	} {
		if got := tt.g.Within(tt.kbs); got != tt.want {
			t.Errorf("%+v.Within(%v) = %v, want %v", tt.g, tt.kbs, got, tt.want)
		}
	}
}
