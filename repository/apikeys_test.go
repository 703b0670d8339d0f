package repository

import (
	"errors"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// The key store: lookups by hash see only unrevoked keys of live users with
// the owner's current role; lists leave revoked keys out; last-used is
// written only when older than the caller's bound.
func TestAPIKeyStore(t *testing.T) {
	s, ctx := migrated(t)
	owner := seedUser(t, s, "keyowner")
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	all := &service.APIKey{ID: newID(), UserID: owner.ID, Name: "all", Prefix: "rk_aaaaaaa", Hash: []byte("hash-all"),
		Scopes: []service.Scope{service.ScopeRead, service.ScopeChat}, ExpiresAt: &exp}
	some := &service.APIKey{ID: newID(), UserID: owner.ID, Name: "some", Prefix: "rk_bbbbbbb", Hash: []byte("hash-some"),
		Scopes: []service.Scope{service.ScopeSearch}, KnowledgeBaseIDs: []service.ID{7, 8}}
	for _, k := range []*service.APIKey{all, some} {
		if err := s.CreateAPIKey(ctx, k, 50); err != nil {
			t.Fatal(err)
		}
	}

	k, u, err := s.APIKeyByHash(ctx, []byte("hash-all"))
	if err != nil || k.ID != all.ID || k.Username != "keyowner" || len(k.Scopes) != 2 || k.KnowledgeBaseIDs != nil ||
		k.ExpiresAt == nil || !k.ExpiresAt.Equal(exp) || u.ID != owner.ID || u.Role != service.RoleUser || u.Disabled {
		t.Fatalf("by hash: %+v %+v %v", k, u, err)
	}
	if k, _, err := s.APIKeyByHash(ctx, []byte("hash-some")); err != nil || len(k.KnowledgeBaseIDs) != 2 || k.KnowledgeBaseIDs[1] != 8 {
		t.Fatalf("knowledge-base list: %+v %v", k, err)
	}
	if _, _, err := s.APIKeyByHash(ctx, []byte("nope")); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}

	// The owner's role and disabled flag come with the key.
	owner.Role, owner.Disabled = service.RoleAdmin, true
	if err := s.UpdateUser(ctx, owner, false); err != nil {
		t.Fatal(err)
	}
	if _, u, err := s.APIKeyByHash(ctx, []byte("hash-all")); err != nil || u.Role != service.RoleAdmin || !u.Disabled {
		t.Fatalf("owner now: %+v %v", u, err)
	}

	// Last used: written once, then not again until older than the bound.
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.TouchAPIKey(ctx, all.ID, now, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchAPIKey(ctx, all.ID, now.Add(10*time.Second), now.Add(-50*time.Second)); err != nil {
		t.Fatal(err)
	}
	if k, _ := s.APIKeyByID(ctx, all.ID); k.LastUsedAt == nil || !k.LastUsedAt.Equal(now) {
		t.Fatalf("last used %v, want %v (the second touch was within the bound)", k.LastUsedAt, now)
	}

	if err := s.RevokeAPIKey(ctx, all.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, all.ID); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
	if _, _, err := s.APIKeyByHash(ctx, []byte("hash-all")); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("revoked key found: %v", err)
	}
	keys, err := s.APIKeys(ctx, owner.ID, 0, 10)
	if err != nil || len(keys) != 1 || keys[0].ID != some.ID {
		t.Fatalf("list after revoke: %v %v", keys, err)
	}
	if keys, err := s.APIKeys(ctx, 0, 0, 10); err != nil || len(keys) != 1 {
		t.Fatalf("everyone's: %v %v", keys, err)
	}

	// A deleted owner's keys are gone.
	if err := s.DeleteUser(ctx, owner.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.APIKeyByHash(ctx, []byte("hash-some")); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("deleted owner's key: %v", err)
	}
	if keys, err := s.APIKeys(ctx, 0, 0, 10); err != nil || len(keys) != 0 {
		t.Fatalf("deleted owner's keys listed: %v %v", keys, err)
	}
}
