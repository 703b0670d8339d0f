package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

func node(code string, kind service.IntentKind, enabled bool, examples []string, children ...*service.IntentNode) *service.IntentNode {
	return &service.IntentNode{Code: code, Name: code, Kind: kind, Enabled: enabled, Examples: examples, Children: children}
}

func codes(ns []*service.IntentNode) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Code
	}
	return out
}

func TestEnabledLeaves(t *testing.T) {
	tree := []*service.IntentNode{
		node("it", service.IntentKB, true, nil,
			node("it.vpn", service.IntentKB, true, nil),
			node("it.mail", service.IntentKB, false, nil)),
		node("hr", service.IntentKB, false, nil, node("hr.leave", service.IntentKB, true, nil)),
		node("chitchat", service.IntentSystem, true, nil),
	}
	got := codes(enabledLeaves(tree))
	want := []string{"it.vpn", "chitchat"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("enabled leaves %v, want %v (a disabled parent disables its subtree)", got, want)
	}
}

func TestLexicalIntentMatching(t *testing.T) {
	leaves := []*service.IntentNode{
		node("it.vpn", service.IntentKB, true, []string{"VPN 连不上", "how do I connect to the VPN"}),
		node("it.logs", service.IntentKB, true, []string{"日志保留多久", "怎么配置日志告警"}),
		node("chitchat", service.IntentSystem, true, []string{"你好", "hello"}),
	}
	tests := []struct {
		question string
		want     string // first matched code, "" for none
	}{
		{"VPN 总是连不上怎么办", "it.vpn"},
		{"How can I connect to the VPN from home?", "it.vpn"},
		{"SLS 日志保留多久？", "it.logs"},
		{"你好", "chitchat"},
		{"量子色动力学", ""},
	}
	for _, tt := range tests {
		t.Run(tt.question, func(t *testing.T) {
			got := pick(lexicalScores(tt.question, leaves), minLexicalScore)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Fatalf("matched %v, want none", codes(got))
			case tt.want != "" && (len(got) == 0 || got[0].Code != tt.want):
				t.Fatalf("matched %v, want %s first", codes(got), tt.want)
			}
		})
	}
}

func TestPickKeepsCloseScoresOnly(t *testing.T) {
	a, b, c, d, e := node("a", service.IntentKB, true, nil), node("b", service.IntentKB, true, nil),
		node("c", service.IntentKB, true, nil), node("d", service.IntentKB, true, nil), node("e", service.IntentKB, true, nil)
	got := codes(pick([]scored{{c, 0.5}, {a, 0.9}, {b, 0.8}, {d, 0.85}, {e, 0.88}}, 0.34))
	if len(got) != maxIntents || got[0] != "a" || got[1] != "e" || got[2] != "d" {
		t.Fatalf("picked %v, want the 3 best within 80%% of the best", got)
	}
	if got := pick([]scored{{a, 0.2}}, 0.34); len(got) != 0 {
		t.Fatalf("picked %v below the threshold", codes(got))
	}
}

func TestJSONObject(t *testing.T) {
	for in, want := range map[string]string{
		`{"scores":[]}`:                        `{"scores":[]}`,
		"```json\n{\"scores\":[]}\n```":        `{"scores":[]}`,
		`Sure! {"scores":[{"code":"a"}]} done`: `{"scores":[{"code":"a"}]}`,
		`no json here`:                         `no json here`,
	} {
		if got := jsonObject(in); got != want {
			t.Errorf("jsonObject(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRouteKnowledgeBases(t *testing.T) {
	a := &service.IntentNode{Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{1, 2}}
	b := &service.IntentNode{Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{2, 3}}
	s := &service.IntentNode{Kind: service.IntentSystem}
	all := map[service.ID]service.KBRole{1: service.KBViewer, 2: service.KBViewer, 3: service.KBViewer}
	got := routeKnowledgeBases([]*service.IntentNode{a, s, b}, all)
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("routed to %v, want the union [1 2 3]", got)
	}
	if got := routeKnowledgeBases(nil, all); got != nil {
		t.Fatalf("no intents routed to %v, want nil (all knowledge bases)", got)
	}
	some := map[service.ID]service.KBRole{3: service.KBViewer}
	if got := routeKnowledgeBases([]*service.IntentNode{a, b}, some); len(got) != 1 || got[0] != 3 {
		t.Fatalf("with only 3 readable routed to %v, want [3]", got)
	}
}

func TestUsableLeavesSkipUnreadableBranches(t *testing.T) {
	private := &service.IntentNode{Code: "hr", Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{1}}
	mixed := &service.IntentNode{Code: "mixed", Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{1, 2}}
	open := &service.IntentNode{Code: "all", Kind: service.IntentKB}
	chit := &service.IntentNode{Code: "chit", Kind: service.IntentSystem}
	got := usableLeaves([]*service.IntentNode{private, mixed, open, chit}, map[service.ID]service.KBRole{2: service.KBViewer})
	var codes []string
	for _, n := range got {
		codes = append(codes, n.Code)
	}
	if strings.Join(codes, ",") != "mixed,all,chit" {
		t.Fatalf("usable leaves %v, want mixed,all,chit (hr routes only to an unreadable knowledge base)", codes)
	}
}

func TestCancelReason(t *testing.T) {
	for _, tt := range []struct {
		cause error
		want  string
	}{
		{service.ErrStopped, ReasonUser},
		{fmt.Errorf("the registry's stop: %w", service.ErrStopped), ReasonUser},
		{service.ErrShutdown, ReasonShutdown},
		{context.Canceled, ReasonDisconnect},
		{errors.New("anything else"), ReasonDisconnect},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tt.cause)
		if got := cancelReason(ctx); got != tt.want {
			t.Errorf("cause %v: reason %q, want %q", tt.cause, got, tt.want)
		}
	}
	// A shutdown that cancels a parent context reaches the task's context.
	parent, cancelParent := context.WithCancelCause(context.Background())
	task, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	cancelParent(service.ErrShutdown)
	if got := cancelReason(task); got != ReasonShutdown {
		t.Errorf("inherited shutdown: reason %q", got)
	}
}

func TestUsableHistory(t *testing.T) {
	msgs := []service.Message{
		{ID: 1, Role: "user", Content: "q1", Status: service.MessageCompleted},
		{ID: 2, Role: "assistant", Content: "busy", Status: service.MessageRejected},
		{ID: 3, Role: "assistant", Content: "a1", Status: service.MessageCompleted},
		{ID: 4, Role: "assistant", Content: "", Status: service.MessageCancelled},
		{ID: 5, Role: "user", Content: "q2", Status: service.MessageCompleted},
	}
	got := usableHistory(msgs, 5, 16)
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 3 {
		t.Fatalf("history %+v: rejected, empty and the current question must be left out", got)
	}
	if got := usableHistory(msgs, 5, 1); len(got) != 1 || got[0].ID != 3 {
		t.Fatalf("history capped at 1: %+v", got)
	}
}

func TestExcerpt(t *testing.T) {
	if got := excerpt("  a\n\nb  c ", 10); got != "a b c" {
		t.Errorf("excerpt folds whitespace: %q", got)
	}
	if got := excerpt("一二三四五六", 3); got != "一二三…" {
		t.Errorf("excerpt cuts runes: %q", got)
	}
}

func TestWithoutHeadings(t *testing.T) {
	for _, tt := range []struct{ content, section, want string }{
		{"VPN guide\nConnecting\nInstall the client.", "VPN guide > Connecting", "Install the client."},
		{"Install the client.", "VPN guide > Connecting", "Install the client."},
		{"VPN guide", "VPN guide", "VPN guide"}, // nothing but a heading: keep it
		{"No section.", "", "No section."},
	} {
		if got := withoutHeadings(tt.content, tt.section); got != tt.want {
			t.Errorf("withoutHeadings(%q, %q) = %q, want %q", tt.content, tt.section, got, tt.want)
		}
	}
}
