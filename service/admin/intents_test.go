package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

func TestPlacement(t *testing.T) {
	// 1 IT > 2 VPN > 3 Mac; 4 HR (leaf); 5 Office > 6 Word
	tree := func() []*service.IntentNode {
		return []*service.IntentNode{
			{ID: 1, Code: "it", Name: "IT"}, {ID: 2, ParentID: 1, Code: "it.vpn", Name: "VPN"},
			{ID: 3, ParentID: 2, Code: "it.vpn.mac", Name: "Mac"}, {ID: 4, Code: "hr", Name: "HR"},
			{ID: 5, Code: "office", Name: "Office"}, {ID: 6, ParentID: 5, Code: "office.word", Name: "Word"},
		}
	}
	tests := []struct {
		name string
		node service.IntentNode
		kind error  // nil: accepted
		path string // when accepted
	}{
		{"new root", service.IntentNode{ID: 9, Code: "new", Name: "New"}, nil, "New"},
		{"new leaf at level 3", service.IntentNode{ID: 9, ParentID: 2, Code: "new", Name: "Win"}, nil, "IT > VPN > Win"},
		{"new node at level 4", service.IntentNode{ID: 9, ParentID: 3, Code: "new", Name: "x"}, service.ErrInvalid, ""},
		{"taken code, other case", service.IntentNode{ID: 9, Code: "IT.VPN", Name: "x"}, service.ErrConflict, ""},
		{"own code on update", service.IntentNode{ID: 2, ParentID: 1, Code: "it.vpn", Name: "VPN2"}, nil, "IT > VPN2"},
		{"missing parent", service.IntentNode{ID: 9, ParentID: 77, Code: "new", Name: "x"}, service.ErrInvalid, ""},
		{"under itself", service.IntentNode{ID: 2, ParentID: 2, Code: "it.vpn", Name: "VPN"}, service.ErrInvalid, ""},
		{"under its grandchild", service.IntentNode{ID: 1, ParentID: 3, Code: "it", Name: "IT"}, service.ErrInvalid, ""},
		{"leaf moves to another root", service.IntentNode{ID: 3, ParentID: 4, Code: "it.vpn.mac", Name: "Mac"}, nil, "HR > Mac"},
		{"two-level subtree under a root", service.IntentNode{ID: 5, ParentID: 4, Code: "office", Name: "Office"}, nil, "HR > Office"},
		{"two-level subtree under level 2", service.IntentNode{ID: 5, ParentID: 2, Code: "office", Name: "Office"}, service.ErrInvalid, ""},
		{"three-level subtree under a root", service.IntentNode{ID: 1, ParentID: 4, Code: "it", Name: "IT"}, service.ErrInvalid, ""},
		{"subtree back to root", service.IntentNode{ID: 2, Code: "it.vpn", Name: "VPN"}, nil, "VPN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.node
			err := placement(&n, tree())
			switch {
			case tt.kind == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.kind != nil && !errors.Is(err, tt.kind):
				t.Fatalf("err %v, want %v", err, tt.kind)
			case tt.kind == nil && n.Path != tt.path:
				t.Fatalf("path %q, want %q", n.Path, tt.path)
			}
		})
	}
}

func TestIntentInput(t *testing.T) {
	yes, no := true, false
	valid := func() IntentInput {
		return IntentInput{Code: "it.vpn", Name: " VPN ", Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{3, 3, 4},
			Examples: []string{" a ", "", "b"}}
	}
	n, err := valid().node(1)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "VPN" || !n.Enabled || len(n.KnowledgeBaseIDs) != 2 || strings.Join(n.Examples, ",") != "a,b" {
		t.Fatalf("normalised node %+v", n)
	}
	tests := []struct {
		name   string
		change func(*IntentInput)
		ok     bool
	}{
		{"disabled", func(in *IntentInput) { in.Enabled = &no }, true},
		{"enabled", func(in *IntentInput) { in.Enabled = &yes }, true},
		{"code with space", func(in *IntentInput) { in.Code = "it vpn" }, false},
		{"code too long", func(in *IntentInput) { in.Code = strings.Repeat("a", 65) }, false},
		{"code starting with a dot", func(in *IntentInput) { in.Code = ".it" }, false},
		{"empty name", func(in *IntentInput) { in.Name = "  " }, false},
		{"long name", func(in *IntentInput) { in.Name = strings.Repeat("名", 101) }, false},
		{"unknown kind", func(in *IntentInput) { in.Kind = "faq" }, false},
		{"kb without knowledge bases", func(in *IntentInput) { in.KnowledgeBaseIDs = nil }, false},
		{"system with knowledge bases", func(in *IntentInput) { in.Kind = service.IntentSystem }, false},
		{"system without", func(in *IntentInput) { in.Kind, in.KnowledgeBaseIDs = service.IntentSystem, nil }, true},
		{"negative kb id", func(in *IntentInput) { in.KnowledgeBaseIDs = []service.ID{-1} }, false},
		{"too many examples", func(in *IntentInput) { in.Examples = make([]string, 51); fill(in.Examples) }, false},
		{"sort out of range", func(in *IntentInput) { in.Sort = 2_000_000 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := valid()
			tt.change(&in)
			_, err := in.node(1)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, service.ErrInvalid) {
				t.Fatalf("err %v is not ErrInvalid", err)
			}
		})
	}
}

func fill(s []string) {
	for i := range s {
		s[i] = "q"
	}
}

func TestTermInput(t *testing.T) {
	tests := []struct {
		name string
		in   TermInput
		ok   bool
	}{
		{"chinese", TermInput{SourceTerm: " 那个打日志的 ", TargetTerm: "SLS 日志服务"}, true},
		{"empty source", TermInput{SourceTerm: " ", TargetTerm: "x"}, false},
		{"empty target", TermInput{SourceTerm: "x"}, false},
		{"same", TermInput{SourceTerm: "x", TargetTerm: " x "}, false},
		{"long source", TermInput{SourceTerm: strings.Repeat("长", 101), TargetTerm: "x"}, false},
		{"long target", TermInput{SourceTerm: "x", TargetTerm: strings.Repeat("长", 201)}, false},
		{"priority", TermInput{SourceTerm: "x", TargetTerm: "y", Priority: -1001}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := tt.in.mapping(1)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err == nil && (m.SourceTerm != "那个打日志的" || !m.Enabled) {
				t.Fatalf("normalised %+v", m)
			}
		})
	}
}
