package api

import (
	"testing"

	"github.com/ragent-go/ragent/service/usage"
)

// Every route adminAudited names is registered, so a renamed route cannot
// silently stop recording refusals.
func TestAdminAuditedRoutesExist(t *testing.T) {
	registered := map[string]bool{}
	// Optional parts register their routes only when present.
	for _, r := range NewRouter(Deps{Quotas: &usage.Quotas{}}).Routes() {
		registered[r.Method+" "+r.Path] = true
	}
	for route := range adminAudited {
		if !registered[route] {
			t.Errorf("adminAudited names %s, which the router does not register", route)
		}
	}
}
