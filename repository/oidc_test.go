package repository

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// SyncOIDCGroups against Postgres: new names make managed groups, an
// existing local group of the name (any case) is adopted, managed groups
// not named are left, local groups' memberships stay, a second sync of the
// same names changes nothing, and concurrent first logins bringing the same
// new group create it once.
func TestSyncOIDCGroups(t *testing.T) {
	s := migratedStore(t)
	ctx := context.Background()
	must := fatalOn(t)
	var next atomic.Int64
	next.Store(1000)
	newID := func() (service.ID, error) { return service.ID(next.Add(1)), nil }
	for _, u := range []service.ID{10, 11} {
		must(s.CreateUser(ctx, &service.User{ID: u, Username: "u" + u.String(), Role: service.RoleUser, SSO: true,
			OIDCIssuer: "https://idp.example", OIDCSubject: "s" + u.String()}))
	}
	// A local group the provider will name (in another case), and one it never names.
	must(s.CreateGroup(ctx, &service.Group{ID: 20, Name: "Finance"}))
	must(s.CreateGroup(ctx, &service.Group{ID: 21, Name: "local-only"}))
	must(s.AddGroupMember(ctx, 21, 10))

	managed := func(name string) string {
		t.Helper()
		g, err := s.GroupByName(ctx, name)
		must(err)
		return g.ManagedBy
	}
	memberOf := func(user service.ID) []string {
		t.Helper()
		var names []string
		must(s.db.Raw(`SELECT g.name FROM group_members gm JOIN groups g ON g.id = gm.group_id
			WHERE gm.user_id = ? ORDER BY lower(g.name)`, int64(user)).Scan(&names).Error)
		return names
	}

	joined, left, err := s.SyncOIDCGroups(ctx, 10, []string{"finance", "staff"}, newID)
	must(err)
	// Joined as the provider names them; left as ragent does.
	if !slices.Equal(joined, []string{"finance", "staff"}) || len(left) != 0 {
		t.Fatalf("first sync: joined %q left %q, want [finance staff] and none", joined, left)
	}
	if managed("Finance") != "oidc" || managed("staff") != "oidc" || managed("local-only") != "" {
		t.Errorf("managed_by: Finance %q staff %q local-only %q", managed("Finance"), managed("staff"), managed("local-only"))
	}
	if g, _ := s.GroupByName(ctx, "finance"); g.ID != 20 {
		t.Errorf("the adopted group is %d, want the existing 20", g.ID)
	}
	if got := memberOf(10); !slices.Equal(got, []string{"Finance", "local-only", "staff"}) {
		t.Errorf("memberships %q", got)
	}

	// The same names again: nothing joined or left, no group made twice.
	var groups int64
	must(s.db.Raw(`SELECT count(*) FROM groups`).Scan(&groups).Error)
	joined, left, err = s.SyncOIDCGroups(ctx, 10, []string{"Finance", "staff"}, newID)
	must(err)
	if len(joined) != 0 || len(left) != 0 {
		t.Errorf("repeated sync: joined %q left %q, want none", joined, left)
	}
	var after int64
	must(s.db.Raw(`SELECT count(*) FROM groups`).Scan(&after).Error)
	if after != groups {
		t.Errorf("groups %d → %d after a repeated sync", groups, after)
	}

	// Leaving finance at the provider: left, the local group's membership stays.
	joined, left, err = s.SyncOIDCGroups(ctx, 10, []string{"staff", "audit"}, newID)
	must(err)
	if !slices.Equal(joined, []string{"audit"}) || !slices.Equal(left, []string{"Finance"}) {
		t.Errorf("sync after leaving: joined %q left %q", joined, left)
	}
	if got := memberOf(10); !slices.Equal(got, []string{"audit", "local-only", "staff"}) {
		t.Errorf("memberships after leaving %q", got)
	}
	// Another user's managed memberships are theirs.
	_, _, err = s.SyncOIDCGroups(ctx, 11, []string{"finance"}, newID)
	must(err)
	// No groups: every managed membership goes, the local one stays.
	joined, left, err = s.SyncOIDCGroups(ctx, 10, []string{}, newID)
	must(err)
	if len(joined) != 0 || !slices.Equal(left, []string{"audit", "staff"}) {
		t.Errorf("empty sync: joined %q left %q", joined, left)
	}
	if got := memberOf(10); !slices.Equal(got, []string{"local-only"}) {
		t.Errorf("memberships after an empty sync %q, want [local-only]", got)
	}
	if got := memberOf(11); !slices.Equal(got, []string{"Finance"}) {
		t.Errorf("user 11's memberships %q, want [Finance]", got)
	}

	// Concurrent first logins bringing the same new group: one group, both in it.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		u := service.ID(100 + i)
		must(s.CreateUser(ctx, &service.User{ID: u, Username: "c" + u.String(), Role: service.RoleUser, SSO: true,
			OIDCIssuer: "https://idp.example", OIDCSubject: "c" + u.String()}))
		wg.Go(func() {
			_, _, errs[i] = s.SyncOIDCGroups(ctx, u, []string{"brand-new", "Brand-New-2"}, newID)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent sync %d: %v", i, err)
		}
	}
	g, err := s.GroupByName(ctx, "brand-new")
	must(err)
	if g.MemberCount != len(errs) || g.ManagedBy != "oidc" {
		t.Errorf("brand-new: %d members, managed by %q; want %d, oidc", g.MemberCount, g.ManagedBy, len(errs))
	}
	var n int64
	must(s.db.Raw(`SELECT count(*) FROM groups WHERE lower(name) IN ('brand-new', 'brand-new-2')`).Scan(&n).Error)
	if n != 2 {
		t.Errorf("%d groups for two new names", n)
	}
}

// TakeOIDCLogin hands a state out once, and never an expired one; the
// re-check claim goes to one of two requests.
func TestOIDCLoginAndCheckClaim(t *testing.T) {
	s := migratedStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.PutOIDCLogin(ctx, service.OIDCLogin{State: "st", Nonce: "n", Verifier: "v", Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutOIDCLogin(ctx, service.OIDCLogin{State: "old", Nonce: "n", Verifier: "v", Expires: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var got atomic.Int32
	for range 4 {
		wg.Go(func() {
			if l, err := s.TakeOIDCLogin(ctx, "st", now); err == nil && l.Verifier == "v" {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	if got.Load() != 1 {
		t.Errorf("%d callbacks took the state, want 1", got.Load())
	}
	if _, err := s.TakeOIDCLogin(ctx, "old", now); err != service.ErrNotFound {
		t.Errorf("expired login: %v, want not found", err)
	}

	if err := s.CreateUser(ctx, &service.User{ID: 10, Username: "u", Role: service.RoleUser, SSO: true, OIDCIssuer: "i", OIDCSubject: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutOIDCSession(ctx, service.OIDCSession{TokenID: "t", UserID: 10, RefreshToken: "r", IDToken: "id", CheckedAt: now, Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var claimed atomic.Int32
	for range 4 {
		wg.Go(func() {
			if ok, err := s.ClaimOIDCCheck(ctx, "t", now, now.Add(time.Minute)); err == nil && ok {
				claimed.Add(1)
			}
		})
	}
	wg.Wait()
	if claimed.Load() != 1 {
		t.Errorf("%d requests claimed the re-check, want 1", claimed.Load())
	}
}
