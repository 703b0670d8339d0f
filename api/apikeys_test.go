package api

import (
	"testing"

	"github.com/ragent-go/ragent/service"
)

// Every entry of the scope table names a registered route with known
// scopes: a renamed route cannot leave a stale grant behind.
func TestKeyScopesNameRoutes(t *testing.T) {
	routes := map[string]bool{}
	for _, r := range NewRouter(Deps{}).Routes() {
		routes[r.Method+" "+r.Path] = true
	}
	for route, scopes := range keyScopes {
		if !routes[route] {
			t.Errorf("keyScopes names %q, which is not a route", route)
		}
		if len(scopes) == 0 {
			t.Errorf("%s: an entry with no scope", route)
		}
		for _, s := range scopes {
			if !s.Valid() {
				t.Errorf("%s: unknown scope %q", route, s)
			}
		}
	}
	for _, closed := range []string{"POST /api/v1/api-keys", "GET /api/v1/api-keys", "DELETE /api/v1/api-keys/:id",
		"POST /api/v1/me/password", "POST /api/v1/users", "PATCH /api/v1/knowledge-bases/:id"} {
		if len(KeyScopes(closed)) != 0 {
			t.Errorf("%s is open to API keys", closed)
		}
	}
	if s := KeyScopes("POST /api/v1/search"); len(s) != 1 || s[0] != service.ScopeSearch {
		t.Errorf("search scopes %v", s)
	}
}
