package api

import "testing"

// Every route adminAudited names is registered, so a renamed route cannot
// silently stop recording refusals.
func TestAdminAuditedRoutesExist(t *testing.T) {
	registered := map[string]bool{}
	for _, r := range NewRouter(Deps{}).Routes() {
		registered[r.Method+" "+r.Path] = true
	}
	for route := range adminAudited {
		if !registered[route] {
			t.Errorf("adminAudited names %s, which the router does not register", route)
		}
	}
}
