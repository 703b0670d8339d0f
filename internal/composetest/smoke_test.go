// Package composetest holds the smoke test of the Docker Compose stack
// (docker-compose.yml). It runs only when RAGENT_COMPOSE_URL names the
// published address of a stack that is up (scripts/compose.sh smoke sets it
// and starts the stack); it talks to ragent only through that address and
// drives the stack with `docker compose` from the repository root, so the
// COMPOSE_* variables of the caller choose the project.
package composetest

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// services the stack runs, each with a healthcheck: the default
// profile's, the scale profile's with COMPOSE_PROFILES=scale (docs/operations.md
// "Docker Compose"), and the opensearch node with COMPOSE_PROFILES=opensearch.
func services() []string {
	out := []string{"postgres", "redis", "namesrv", "broker", "embedder", "ragent"}
	if scaleProfile() {
		out = []string{"postgres", "redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3",
			"namesrv", "broker", "embedder", "ragent-scale", "lb", "fakellm"}
	}
	if strings.Contains(os.Getenv("COMPOSE_PROFILES"), "opensearch") {
		out = append(out, "opensearch")
	}
	return out
}

func scaleProfile() bool { return strings.Contains(os.Getenv("COMPOSE_PROFILES"), "scale") }

func TestComposeSmoke(t *testing.T) {
	base := os.Getenv("RAGENT_COMPOSE_URL")
	if base == "" {
		t.Skip("RAGENT_COMPOSE_URL is not set (scripts/compose.sh smoke runs this test)")
	}
	if scaleProfile() {
		t.Skip("the scale profile is up: TestComposeScale checks it")
	}
	base = strings.TrimRight(base, "/")
	s := &stack{t: t, base: base}

	s.allHealthy()
	password := s.adminPassword("ragent")

	// Sign-in: a wrong password and a missing token are 401.
	if st, body := s.request("POST", "/api/v1/auth/login", "", map[string]any{"username": "admin", "password": password + "x"}); st != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d %s, want 401", st, body)
	}
	if st, body := s.request("GET", "/api/v1/me", "", nil); st != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s, want 401", st, body)
	}
	token := s.login(password)

	var kb struct{ ID string }
	s.decode(s.mustRequest("POST", "/api/v1/knowledge-bases", token, map[string]any{"name": "compose smoke " + testenv.RandomSuffix()}, http.StatusCreated), &kb)

	docx := testdocs.Docx(t, testdocs.DocxParagraph("Heading1", "Expense policy")+
		testdocs.DocxParagraph("", "Travel expenses are reimbursed within 14 days when the receipt is uploaded to the finance portal."))
	md := []byte("# 年假制度\n\n员工每年享有十五天带薪年假，未休完的年假可以顺延到下一年的三月底。\n")
	docxID := s.upload(token, kb.ID, "expenses.docx", docx)
	mdID := s.upload(token, kb.ID, "年假.md", md)
	s.waitReady(token, docxID)
	s.waitReady(token, mdID)
	s.ingestedThroughRocketMQ()
	if backend := os.Getenv("RAGENT_SEARCH_BACKEND"); backend != "" {
		if logs := s.compose("logs", "--no-color", "ragent"); !strings.Contains(logs, `"search_backend":"`+backend+`"`) {
			t.Fatalf("ragent's log does not show search backend %s:\n%s", backend, tail(logs, 30))
		}
	}

	check := func(when string) {
		t.Helper()
		s.searchFinds(token, kb.ID, "how fast are travel expenses reimbursed", "expenses.docx", when)
		s.searchFinds(token, kb.ID, "年假可以顺延吗", "年假.md", when)
		s.chatCites(token, kb.ID, "年假可以顺延到什么时候？", when)
	}
	check("first start")

	// A restart of ragent keeps everything, the session included.
	s.compose("restart", "ragent")
	s.waitHealthy("ragent")
	s.mustRequest("GET", "/api/v1/me", token, nil, http.StatusOK)
	check("after docker compose restart ragent")

	// down and up: new containers, the same volumes.
	s.compose("down")
	s.compose("up", "--wait")
	s.allHealthy()
	s.mustRequest("GET", "/api/v1/me", token, nil, http.StatusOK)
	token = s.login(password)
	for _, id := range []string{docxID, mdID} {
		var doc struct{ Status string }
		s.decode(s.mustRequest("GET", "/api/v1/documents/"+id, token, nil, http.StatusOK), &doc)
		if doc.Status != "ready" {
			t.Fatalf("after down and up: document %s is %q, want ready", id, doc.Status)
		}
	}
	check("after docker compose down and up")
}

type stack struct {
	t    *testing.T
	base string
}

// compose runs `docker compose ARGS...` in the repository root.
func (s *stack) compose(args ...string) string {
	s.t.Helper()
	out, err := s.tryCompose(args...)
	if err != nil {
		s.t.Fatalf("docker compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s *stack) tryCompose(args ...string) (string, error) {
	cmd := exec.Command("docker", append([]string{"compose"}, args...)...)
	cmd.Dir = "../.."
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// health reports the state and health of every running container of the
// project, by service ("running/healthy" each; a service with replicas
// has one entry per container).
func (s *stack) health() map[string][]string {
	s.t.Helper()
	got := map[string][]string{}
	for _, c := range s.containers() {
		got[c.Service] = append(got[c.Service], c.State+"/"+c.Health)
	}
	return got
}

type container struct{ Service, Name, State, Health string }

func (s *stack) containers() []container {
	s.t.Helper()
	var out []container
	for _, line := range strings.Split(strings.TrimSpace(s.compose("ps", "--format", "json")), "\n") {
		if line == "" {
			continue
		}
		var c container
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			s.t.Fatalf("docker compose ps: %v: %s", err, line)
		}
		out = append(out, c)
	}
	return out
}

func healthy(states []string) bool {
	for _, st := range states {
		if st != "running/healthy" {
			return false
		}
	}
	return len(states) > 0
}

func (s *stack) allHealthy() {
	s.t.Helper()
	got := s.health()
	for _, svc := range services() {
		if !healthy(got[svc]) {
			s.t.Fatalf("service %s is %q, want running/healthy (all: %v)", svc, got[svc], got)
		}
	}
}

func (s *stack) waitHealthy(svc string) {
	s.t.Helper()
	testenv.Eventually(s.t, 3*time.Minute, svc+" healthy", func() bool { return healthy(s.health()[svc]) })
}

var firstAdmin = regexp.MustCompile(`first admin created — username "admin", password "([^"]+)"`)

// adminPassword reads the password ragent printed at its first start (one
// of svc's replicas creates the admin).
func (s *stack) adminPassword(svc string) string {
	s.t.Helper()
	m := firstAdmin.FindStringSubmatch(s.compose("logs", "--no-color", svc))
	if m == nil {
		s.t.Fatal("ragent's log has no first-admin line (the smoke test needs fresh volumes: scripts/compose.sh smoke)")
	}
	return m[1]
}

// ingestedThroughRocketMQ: ragent runs the RocketMQ driver (its start line
// says so) and the broker stored messages of the ingest topic.
func (s *stack) ingestedThroughRocketMQ() {
	s.t.Helper()
	logs := s.compose("logs", "--no-color", "ragent")
	if !strings.Contains(logs, `"mq_driver":"rocketmq"`) {
		s.t.Fatalf("ragent's log does not show the rocketmq queue driver:\n%s", tail(logs, 30))
	}
	queue := strings.TrimSpace(s.compose("exec", "-T", "broker", "ls", "/home/rocketmq/store/consumequeue/"+service.IngestTopic))
	if queue == "" {
		s.t.Fatalf("the broker has no consume queue of %s", service.IngestTopic)
	}
}

func (s *stack) request(method, path, token string, body any) (int, []byte) {
	s.t.Helper()
	return s.send(testenv.NewRequest(s.t, method, s.base+path, body), token)
}

func (s *stack) send(req *http.Request, token string) (int, []byte) {
	s.t.Helper()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	return resp.StatusCode, b
}

func (s *stack) mustRequest(method, path, token string, body any, want int) []byte {
	s.t.Helper()
	st, b := s.request(method, path, token, body)
	if st != want {
		s.t.Fatalf("%s %s: %d %s, want %d", method, path, st, b, want)
	}
	return b
}

func (s *stack) decode(b []byte, v any) {
	s.t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		s.t.Fatalf("decoding %s: %v", b, err)
	}
}

func (s *stack) login(password string) string {
	s.t.Helper()
	var out struct{ Token string }
	s.decode(s.mustRequest("POST", "/api/v1/auth/login", "", map[string]any{"username": "admin", "password": password}, http.StatusOK), &out)
	if out.Token == "" {
		s.t.Fatal("login answered no token")
	}
	return out.Token
}

func (s *stack) upload(token, kb, name string, content []byte) string {
	s.t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	part, err := w.CreateFormFile("file", name)
	if err != nil {
		s.t.Fatal(err)
	}
	part.Write(content)
	w.Close()
	req, err := http.NewRequest("POST", s.base+"/api/v1/knowledge-bases/"+kb+"/documents", &body)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	st, b := s.send(req, token)
	if st != http.StatusAccepted && st != http.StatusCreated {
		s.t.Fatalf("upload %s: %d %s", name, st, b)
	}
	var doc struct{ ID string }
	s.decode(b, &doc)
	return doc.ID
}

func (s *stack) waitReady(token, id string) {
	s.t.Helper()
	testenv.Eventually(s.t, 5*time.Minute, "document "+id+" ready", func() bool {
		var doc struct{ Status, Error string }
		s.decode(s.mustRequest("GET", "/api/v1/documents/"+id, token, nil, http.StatusOK), &doc)
		if doc.Status == "failed" {
			s.t.Fatalf("document %s failed: %s", id, doc.Error)
		}
		return doc.Status == "ready"
	})
}

func (s *stack) searchFinds(token, kb, query, docName, when string) {
	s.t.Helper()
	var res struct {
		Results []struct{ DocumentName, Content string }
	}
	s.decode(s.mustRequest("POST", "/api/v1/search", token, map[string]any{"query": query, "knowledgeBaseIds": []string{kb}}, http.StatusOK), &res)
	if len(res.Results) == 0 || res.Results[0].DocumentName != docName {
		s.t.Fatalf("%s: search %q: %+v, want %s first", when, query, res.Results, docName)
	}
}

var citation = regexp.MustCompile(`\[\d+\]`)

// chatCites: the stream is meta, sources, message…, finish, done, with a
// source and a citation of it in the answer.
func (s *stack) chatCites(token, kb, question, when string) {
	s.t.Helper()
	b, _ := json.Marshal(map[string]any{"question": question, "knowledgeBaseIds": []string{kb}})
	req, err := http.NewRequest("POST", s.base+"/api/v1/chat", bytes.NewReader(b))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	st, body := s.send(req, token)
	if st != http.StatusOK {
		s.t.Fatalf("%s: chat: %d %s", when, st, body)
	}
	var names []string
	var sources, answer string
	var name string
	for _, line := range strings.Split(string(body), "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
			if len(names) == 0 || names[len(names)-1] != name {
				names = append(names, name)
			}
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			switch name {
			case "sources":
				sources = data
			case "message":
				answer += data
			}
		}
	}
	// A queue event may come first after Redis restarted: its replication
	// id changed, so the failover fence holds new grants until running
	// holders could re-assert theirs (docs/operations.md).
	if got := strings.Join(names, " "); got != "meta sources message finish done" && got != "meta queue sources message finish done" {
		s.t.Fatalf("%s: chat stream %q, want meta [queue] sources message finish done:\n%s", when, got, body)
	}
	if !strings.Contains(sources, "年假.md") || !citation.MatchString(answer) {
		s.t.Fatalf("%s: chat without citations: sources %s, answer %s", when, sources, answer)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
