package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// keyStore keeps API keys in memory and counts last-used writes.
type keyStore struct {
	keys    map[service.ID]*service.APIKey
	revoked map[service.ID]bool
	owner   *service.User
	touches int
}

func (s *keyStore) CreateAPIKey(_ context.Context, k *service.APIKey, max int) error {
	live := 0
	for id := range s.keys {
		if !s.revoked[id] {
			live++
		}
	}
	if live >= max {
		return service.ErrConflict
	}
	c := *k
	s.keys[k.ID] = &c
	return nil
}

func (s *keyStore) APIKeyByHash(_ context.Context, hash []byte) (*service.APIKey, *service.User, error) {
	for _, k := range s.keys {
		if string(k.Hash) == string(hash) && !s.revoked[k.ID] {
			c, u := *k, *s.owner
			return &c, &u, nil
		}
	}
	return nil, nil, service.ErrNotFound
}

func (s *keyStore) APIKeys(_ context.Context, userID, _ service.ID, _ int) ([]*service.APIKey, error) {
	var out []*service.APIKey
	for _, k := range s.keys {
		if !s.revoked[k.ID] && (userID == 0 || k.UserID == userID) {
			out = append(out, k)
		}
	}
	return out, nil
}

func (s *keyStore) APIKeyByID(_ context.Context, id service.ID) (*service.APIKey, error) {
	if k, ok := s.keys[id]; ok && !s.revoked[id] {
		return k, nil
	}
	return nil, service.ErrNotFound
}

func (s *keyStore) RevokeAPIKey(_ context.Context, id service.ID) error {
	s.revoked[id] = true
	return nil
}

func (s *keyStore) TouchAPIKey(_ context.Context, id service.ID, at, notBefore time.Time) error {
	k := s.keys[id]
	if k.LastUsedAt == nil || k.LastUsedAt.Before(notBefore) {
		s.touches++
		k.LastUsedAt = &at
	}
	return nil
}

// readAll reads every knowledge base but 99.
type readAll struct{}

func (readAll) CheckReadable(_ context.Context, _ service.Principal, ids []service.ID) error {
	if slices.Contains(ids, 99) {
		return service.Errorf(service.ErrNotFound, "knowledge base 99 not found")
	}
	return nil
}

func newKeys(t *testing.T) (*APIKeys, *keyStore, *clock) {
	t.Helper()
	st := &keyStore{keys: map[service.ID]*service.APIKey{}, revoked: map[service.ID]bool{},
		owner: &service.User{ID: 7, Username: "bob", Role: service.RoleUser}}
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	audit := &auditLog{}
	return NewAPIKeys(st, readAll{}, &ids{}, service.NewAuditor(audit, audit, &ids{}, service.AuditorConfig{Now: clk.Now}), Config{Now: clk.Now}), st, clk
}

var bob = service.Principal{UserID: 7, Username: "bob", Role: service.RoleUser}

func TestAPIKeyLifecycle(t *testing.T) {
	a, st, clk := newKeys(t)
	ctx := context.Background()
	exp := clk.Now().Add(time.Hour)
	k, err := a.Create(ctx, bob, KeyInput{Name: " bot ", Scopes: []service.Scope{"search", "read", "search"},
		KnowledgeBaseIDs: []service.ID{3, 3}, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^rk_[0-9A-Za-z]{43}$`).MatchString(k.Key) || k.Prefix != k.Key[:10] || k.Name != "bot" {
		t.Fatalf("created %+v", k)
	}
	if sum := sha256.Sum256([]byte(k.Key)); string(st.keys[k.ID].Hash) != string(sum[:]) {
		t.Fatal("stored hash is not the key's SHA-256")
	}
	if len(k.Scopes) != 2 || len(k.KnowledgeBaseIDs) != 1 {
		t.Fatalf("scopes %v, knowledge bases %v: want duplicates dropped", k.Scopes, k.KnowledgeBaseIDs)
	}

	p, err := a.Authenticate(ctx, k.Key)
	if err != nil || p.UserID != 7 || p.Key == nil || p.Key.KeyID != k.ID || !p.Key.HasScope(service.ScopeSearch) || p.Key.HasScope(service.ScopeChat) {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	// Last-used is written at most once a minute.
	for range 5 {
		clk.Add(10 * time.Second)
		if _, err := a.Authenticate(ctx, k.Key); err != nil {
			t.Fatal(err)
		}
	}
	if st.touches != 1 {
		t.Fatalf("%d last-used writes in 50 s, want 1", st.touches)
	}
	clk.Add(15 * time.Second)
	if _, err := a.Authenticate(ctx, k.Key); err != nil || st.touches != 2 {
		t.Fatalf("after a minute: %v, %d writes", err, st.touches)
	}

	// A key cannot manage keys.
	if _, err := a.Create(ctx, p, KeyInput{Name: "child", Scopes: []service.Scope{"read"}}); !errors.Is(err, service.ErrForbidden) {
		t.Fatalf("key creates a key: %v", err)
	}
	// Another user cannot revoke it; the owner can.
	if err := a.Revoke(ctx, service.Principal{UserID: 8, Role: service.RoleUser}, k.ID); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("stranger revokes: %v", err)
	}
	if err := a.Revoke(ctx, bob, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, k.Key); !errors.Is(err, service.ErrUnauthenticated) {
		t.Fatalf("revoked key: %v", err)
	}
}

func TestAPIKeyRefusals(t *testing.T) {
	a, st, clk := newKeys(t)
	ctx := context.Background()
	exp := clk.Now().Add(time.Minute)
	k, err := a.Create(ctx, bob, KeyInput{Name: "short", Scopes: []service.Scope{"read"}, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	// The unknown key differs from the real one in its last character,
	// whatever that character is.
	last := "x"
	if strings.HasSuffix(k.Key, last) {
		last = "y"
	}
	for name, key := range map[string]string{
		"unknown":     "rk_" + k.Key[3:len(k.Key)-1] + last,
		"not a key":   "Bearer-ish",
		"empty":       "",
		"no prefix":   k.Key[3:],
		"other case":  "RK_" + k.Key[3:],
		"with spaces": " " + k.Key,
	} {
		if _, err := a.Authenticate(ctx, key); !errors.Is(err, service.ErrUnauthenticated) {
			t.Errorf("%s: %v", name, err)
		}
	}
	st.owner.Disabled = true
	if _, err := a.Authenticate(ctx, k.Key); !errors.Is(err, service.ErrUnauthenticated) {
		t.Fatalf("disabled owner: %v", err)
	}
	st.owner.Disabled = false
	clk.Add(time.Minute)
	if _, err := a.Authenticate(ctx, k.Key); !errors.Is(err, service.ErrUnauthenticated) {
		t.Fatalf("expired key: %v", err)
	}
	// The owner's current role is the key's, read with the key.
	st.owner.Role = service.RoleAdmin
	k2, _ := a.Create(ctx, bob, KeyInput{Name: "x", Scopes: []service.Scope{"read"}})
	if p, err := a.Authenticate(ctx, k2.Key); err != nil || !p.IsAdmin() {
		t.Fatalf("promoted owner: %+v %v", p, err)
	}

	for name, in := range map[string]KeyInput{
		"no name":       {Scopes: []service.Scope{"read"}},
		"no scope":      {Name: "x"},
		"unknown scope": {Name: "x", Scopes: []service.Scope{"admin"}},
		"empty kb list": {Name: "x", Scopes: []service.Scope{"read"}, KnowledgeBaseIDs: []service.ID{}},
		"past expiry":   {Name: "x", Scopes: []service.Scope{"read"}, ExpiresAt: &exp},
	} {
		if _, err := a.Create(ctx, bob, in); !errors.Is(err, service.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if _, err := a.Create(ctx, bob, KeyInput{Name: "x", Scopes: []service.Scope{"read"}, KnowledgeBaseIDs: []service.ID{3, 99}}); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("unreadable knowledge base: %v", err)
	}
}

// Keys are 32 random bytes: never the same twice, always the same length.
func TestNewKeyFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k, err := newKey(service.APIKeyPrefix)
		if err != nil || len(k) != 46 || seen[k] {
			t.Fatalf("key %q (%d), %v", k, len(k), err)
		}
		seen[k] = true
	}
}

// TestAPIKeyMaxTTL: no key lives longer than Config.KeyMaxTTL from its
// creation: a longer expiry is refused, a missing one gets that longest
// life, and a key stored without an expiry (before the cap) ends there too.
func TestAPIKeyMaxTTL(t *testing.T) {
	a, st, clk := newKeys(t)
	ctx := context.Background()
	year9999 := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	over := clk.Now().Add(DefaultKeyMaxTTL + time.Second)
	for _, exp := range []time.Time{year9999, over} {
		_, err := a.Create(ctx, bob, KeyInput{Name: "forever", Scopes: []service.Scope{"read"}, ExpiresAt: &exp})
		var se *service.Error
		if !errors.Is(err, service.ErrInvalid) || !errors.As(err, &se) || se.Details["field"] != "expiresAt" ||
			!strings.Contains(err.Error(), "365 days") {
			t.Fatalf("expiresAt %s: %v, want invalid expiresAt naming the cap", exp, err)
		}
	}
	exact := clk.Now().Add(DefaultKeyMaxTTL)
	if _, err := a.Create(ctx, bob, KeyInput{Name: "a year", Scopes: []service.Scope{"read"}, ExpiresAt: &exact}); err != nil {
		t.Fatalf("expiry at the cap: %v", err)
	}
	k, err := a.Create(ctx, bob, KeyInput{Name: "default", Scopes: []service.Scope{"read"}})
	if err != nil || k.ExpiresAt == nil || !k.ExpiresAt.Equal(exact) {
		t.Fatalf("no expiry given: %+v, %v; want %s", k, err, exact)
	}
	// A key from before the cap, without an expiry.
	old, err := a.Create(ctx, bob, KeyInput{Name: "old", Scopes: []service.Scope{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	st.keys[old.ID].ExpiresAt = &year9999
	keys, err := a.List(ctx, bob, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range keys {
		if l.ExpiresAt == nil || l.ExpiresAt.After(exact) {
			t.Fatalf("listed %s expires %v, after the cap %s", l.Name, l.ExpiresAt, exact)
		}
	}
	clk.Add(DefaultKeyMaxTTL - time.Second)
	for _, key := range []string{k.Key, old.Key} {
		if p, err := a.Authenticate(ctx, key); err != nil || !p.Expires.Equal(exact) {
			t.Fatalf("a second before the cap: %+v, %v", p, err)
		}
	}
	clk.Add(time.Second)
	for _, key := range []string{k.Key, old.Key} {
		if _, err := a.Authenticate(ctx, key); !errors.Is(err, service.ErrUnauthenticated) {
			t.Fatalf("at the cap: %v, want unauthenticated", err)
		}
	}
}
