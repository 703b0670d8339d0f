package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

func TestViolations(t *testing.T) {
	m := Module + "/"
	tests := []struct {
		name string
		pkg  Package
		want int
	}{
		{"service stdlib only", Package{"service", []string{"context", "time"}}, 0},
		{"service imports gin", Package{"service", []string{"github.com/gin-gonic/gin"}}, 2},
		{"feature imports service and text", Package{"service/chat", []string{m + "service", m + "text", m + "service/retrieve"}}, 0},
		{"feature imports gorm", Package{"service/ingest", []string{"gorm.io/gorm"}}, 1},
		{"feature imports adapter", Package{"service/chat", []string{m + "repository"}}, 1},
		{"feature imports mechanism", Package{"service/chat", []string{m + "ratelimit"}}, 1},
		{"retrieve imports chat", Package{"service/retrieve", []string{m + "service/chat"}}, 1},
		{"ingest imports admin", Package{"service/ingest", []string{m + "service/admin"}}, 1},
		{"parse imports the service root and text", Package{"service/ingest/parse", []string{m + "service", m + "text", "golang.org/x/net/html"}}, 0},
		{"parse imports ingest", Package{"service/ingest/parse", []string{m + "service/ingest"}}, 1},
		{"parse imports an adapter", Package{"service/ingest/parse", []string{m + "repository"}}, 1},
		{"parse imports gorm", Package{"service/ingest/parse", []string{"gorm.io/gorm"}}, 1},
		{"ingest imports parse", Package{"service/ingest", []string{m + "service/ingest/parse"}}, 0},
		{"keyword core imports the stdlib", Package{"repository/keyword", []string{"sort", "encoding/binary"}}, 0},
		{"keyword core imports gorm", Package{"repository/keyword", []string{"gorm.io/gorm"}}, 1},
		{"keyword core imports repository", Package{"repository/keyword", []string{m + "repository"}}, 1},
		{"keyword core imports the service root", Package{"repository/keyword", []string{m + "service"}}, 0},
		{"keyword core imports pgx", Package{"repository/keyword", []string{"github.com/jackc/pgx/v5"}}, 1},
		{"repository imports its keyword core", Package{"repository", []string{m + "repository/keyword", "gorm.io/gorm"}}, 0},
		{"adapter imports service root", Package{"repository", []string{m + "service", "gorm.io/gorm"}}, 0},
		{"adapter imports feature", Package{"cache", []string{m + "service/admin"}}, 1},
		{"adapter imports adapter", Package{"cache", []string{m + "repository"}}, 1},
		{"opensearch imports repository", Package{"opensearch", []string{m + "service", m + "repository"}}, 1},
		{"opensearch imports a feature", Package{"opensearch", []string{m + "service/retrieve"}}, 1},
		{"driver subpackage imports its root", Package{"mq/rocketmq", []string{m + "mq"}}, 0},
		{"mechanism imports redis and prometheus", Package{"ratelimit", []string{"github.com/redis/go-redis/v9", "github.com/prometheus/client_golang/prometheus"}}, 0},
		{"mechanism imports service", Package{"idempotent", []string{m + "service"}}, 1},
		{"mechanism imports the lease mechanism", Package{"idempotent", []string{m + "internal/lease"}}, 0},
		{"adapter imports the lease mechanism", Package{"idgen", []string{m + "internal/lease", "github.com/redis/go-redis/v9"}}, 0},
		{"mechanism imports another internal package", Package{"ratelimit", []string{m + "internal/testenv"}}, 1},
		{"lease imports go-redis", Package{"internal/lease", []string{"embed", "github.com/redis/go-redis/v9"}}, 0},
		{"lease imports the domain", Package{"internal/lease", []string{m + "service"}}, 1},
		{"lease imports prometheus", Package{"internal/lease", []string{"github.com/prometheus/client_golang/prometheus"}}, 1},
		{"mechanism imports gin", Package{"ratelimit", []string{"github.com/gin-gonic/gin"}}, 2},
		{"api imports mechanism and features", Package{"api", []string{m + "ratelimit", m + "service/chat", "github.com/gin-gonic/gin", m + "web"}}, 0},
		{"api imports redis", Package{"api", []string{"github.com/redis/go-redis/v9"}}, 1},
		{"api imports adapter", Package{"api", []string{m + "repository"}}, 1},
		{"mcp server imports api and features", Package{"api/mcp", []string{m + "api", m + "service/chat", m + "ratelimit", "github.com/modelcontextprotocol/go-sdk/mcp"}}, 0},
		{"mcp server imports adapter", Package{"api/mcp", []string{m + "repository"}}, 1},
		{"api imports the mcp server", Package{"api", []string{m + "api/mcp"}}, 1},
		{"cmd imports anything", Package{"cmd/ragent", []string{m + "repository", "github.com/gin-gonic/gin", "gorm.io/gorm"}}, 0},
		{"unknown top-level package", Package{"util", []string{"fmt"}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Violations(tt.pkg); len(got) != tt.want {
				t.Errorf("Violations(%+v) = %q, want %d violations", tt.pkg, got, tt.want)
			}
		})
	}
}

// TestModule checks the real import graph of every package of the module.
func TestModule(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", Module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		n++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, Module), "/")
		if rel == "" {
			continue
		}
		for _, v := range Violations(Package{Path: rel, Imports: p.Imports}) {
			t.Error(v)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	if n < 5 {
		t.Fatalf("go list returned only %d packages; is the module layout broken?", n)
	}
}
