// Package archtest enforces the dependency rule of DESIGN.md §1 over the
// module's import graph (read with `go list`), so the rule stays true as the
// code grows. Its test fails on any violation, and on any file tracked by git
// that is over 1 MiB (build outputs and dumps stay out of the repository).
package archtest

import (
	"fmt"
	"slices"
	"strings"
)

// Module is ragent's module path.
const Module = "github.com/ragent-go/ragent"

// Package is a node of the import graph: its path relative to the module
// ("service/chat") and its non-test imports.
type Package struct {
	Path    string
	Imports []string
}

var (
	adapters   = []string{"repository", "cache", "stream", "mq", "llm", "idgen", "opensearch", "oidc"}
	mechanisms = []string{"ratelimit", "idempotent"}
	// leasePkg is the one module package mechanisms may import: pure Redis
	// lease mechanics (scripts, renewal timer), no domain.
	leasePkg = "internal/lease"
	// parsePkg reads files (blocks and chunks out) for ingest, and
	// keywordPkg is the pure core of the keyword index for repository: each
	// is split out of its parent to be read and tested alone, so neither may
	// reach back into what it was split from.
	parsePkg   = "service/ingest/parse"
	keywordPkg = "repository/keyword"
	drivers    = []string{"gorm.io/", "github.com/redis/go-redis", "github.com/apache/rocketmq-client-go", "github.com/jackc/pgx", "github.com/pgvector/"}
)

// top returns the first element of a relative path ("mq/rocketmq" → "mq").
func top(rel string) string {
	t, _, _ := strings.Cut(rel, "/")
	return t
}

func isDriver(imp string) bool {
	for _, d := range drivers {
		if strings.HasPrefix(imp, d) {
			return true
		}
	}
	return false
}

func isStdlib(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

// Violations returns every breach of the dependency rule by p.
func Violations(p Package) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("%s imports %s: ", p.Path, args[0])+fmt.Sprintf(format, args[1:]...))
	}
	for _, imp := range p.Imports {
		rel, internal := strings.CutPrefix(imp, Module+"/")
		ownTop := top(p.Path)
		switch {
		case p.Path == parsePkg:
			if internal && rel != "service" && rel != "text" || isDriver(imp) {
				bad("the file reader knows no store and no use case: it imports only the service root and text", imp)
			}
		case p.Path == keywordPkg:
			if !isStdlib(imp) && !(internal && rel == "service") {
				bad("the keyword index's core is pure: the standard library and the service root, the SQL stays in repository", imp)
			}
		case p.Path == "service":
			if !isStdlib(imp) {
				bad("the vocabulary package imports the standard library only", imp)
			}
		case strings.HasPrefix(p.Path, "service/"):
			feature := top(strings.TrimPrefix(p.Path, "service/"))
			switch {
			case strings.Contains(imp, "gin-gonic") || isDriver(imp):
				bad("use cases declare interfaces instead of importing drivers", imp)
			case internal && (slices.Contains(adapters, top(rel)) || slices.Contains(mechanisms, top(rel)) || top(rel) == "api" || top(rel) == "cmd"):
				bad("use cases must not import adapters, mechanisms or api", imp)
			case internal && strings.HasPrefix(rel, "service/"):
				other := top(strings.TrimPrefix(rel, "service/"))
				if other != feature && !(feature == "chat" && other == "retrieve") {
					bad("features form a DAG (chat → retrieve only); share through the service root", imp)
				}
			}
		case slices.Contains(adapters, ownTop):
			switch {
			case internal && (top(rel) == "api" || strings.HasPrefix(rel, "service/") || top(rel) == "cmd"):
				bad("adapters import only the service root", imp)
			case internal && slices.Contains(adapters, top(rel)) && top(rel) != ownTop:
				bad("adapters must not import each other", imp)
			case internal && slices.Contains(mechanisms, top(rel)):
				bad("adapters must not import mechanisms", imp)
			}
		case p.Path == leasePkg:
			if internal || (!isStdlib(imp) && !strings.HasPrefix(imp, "github.com/redis/go-redis")) {
				bad("the shared lease mechanism imports only the stdlib and go-redis", imp)
			}
		case slices.Contains(mechanisms, ownTop):
			switch {
			case internal && top(rel) != ownTop && rel != leasePkg:
				bad("mechanisms know no domain", imp)
			case !internal && !isStdlib(imp) && !strings.HasPrefix(imp, "github.com/redis/go-redis") &&
				!strings.HasPrefix(imp, "github.com/prometheus/"):
				bad("mechanisms import only the stdlib, go-redis and Prometheus", imp)
			}
		case ownTop == "api":
			switch {
			case isDriver(imp):
				bad("api reaches data through services", imp)
			case internal && (slices.Contains(adapters, top(rel)) || top(rel) == "cmd"):
				bad("api reaches adapters through services and pinger interfaces", imp)
			case p.Path == "api" && rel == "api/mcp":
				// api/mcp uses api's scope table; the router sees the MCP
				// server only as Deps.MCP, an http.Handler cmd passes in.
				bad("the router does not import the MCP server (cmd mounts it through Deps.MCP)", imp)
			}
		case ownTop != "cmd" && ownTop != "internal" && ownTop != "migrations" && ownTop != "web" && ownTop != "text":
			// New top-level packages must be placed in the rule on purpose.
			out = append(out, fmt.Sprintf("%s: package outside the layout of DESIGN.md §1", p.Path))
			return out
		}
		if strings.Contains(imp, "gin-gonic") && ownTop != "api" && ownTop != "cmd" {
			bad("only api imports gin", imp)
		}
		if ownTop == "text" && internal {
			bad("text is a pure library", imp)
		}
	}
	return out
}
