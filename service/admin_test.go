package service

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestApplyTermMappings(t *testing.T) {
	m := func(src, dst string, prio int) TermMapping {
		return TermMapping{SourceTerm: src, TargetTerm: dst, Priority: prio, Enabled: true}
	}
	disabled := m("VPN", "never", 0)
	disabled.Enabled = false
	tests := []struct {
		name     string
		q        string
		mappings []TermMapping
		want     string
	}{
		{"no mappings", "怎么连 VPN", nil, "怎么连 VPN"},
		{"chinese colloquial phrase", "那个打日志的怎么查", []TermMapping{m("那个打日志的", "SLS 日志服务", 0)}, "SLS 日志服务怎么查"},
		{"longest match wins over a contained term", "那个打日志的挂了",
			[]TermMapping{m("日志", "log", 9), m("那个打日志的", "SLS 日志服务", 0)}, "SLS 日志服务挂了"},
		{"target is not rescanned", "日志服务", []TermMapping{m("日志服务", "SLS 日志服务", 0)}, "SLS 日志服务"},
		{"overlapping terms at different positions", "日志服务挂了，日志丢了",
			[]TermMapping{m("日志", "B", 0), m("日志服务", "A", 0)}, "A挂了，B丢了"},
		{"leftmost match wins over a longer one starting later", "甲乙丙丁",
			[]TermMapping{m("乙丙丁", "Y", 0), m("甲乙", "X", 0)}, "X丙丁"},
		{"target containing its own source terminates", "VPN 连不上", []TermMapping{m("VPN", "VPN 虚拟专用网", 0)}, "VPN 虚拟专用网 连不上"},
		{"priority breaks a tie of equal terms", "工单", []TermMapping{m("工单", "low", 1), m("工单", "high", 5)}, "high"},
		{"disabled mapping ignored", "VPN", []TermMapping{disabled}, "VPN"},
		{"empty source ignored", "abc", []TermMapping{m("", "x", 0)}, "abc"},
		{"ascii case-insensitive", "K8S 集群", []TermMapping{m("k8s", "Kubernetes", 0)}, "Kubernetes 集群"},
		{"latin term only at word boundaries", "LOAD the AD, ADD AD",
			[]TermMapping{m("AD", "Active Directory", 0)}, "LOAD the Active Directory, ADD Active Directory"},
		{"latin term next to chinese is at a boundary", "用AD登录", []TermMapping{m("AD", "Active Directory", 0)}, "用Active Directory登录"},
		{"no match inside a multibyte rune", "中文", []TermMapping{m("\xb8", "x", 0)}, "中文"},
		{"invalid utf-8 kept", "a\xffb", []TermMapping{m("b", "c", 0)}, "a\xffc"},
		{"several mappings in one question", "OA 里的报销单和 VPN",
			[]TermMapping{m("OA", "办公自动化系统", 0), m("报销单", "费用报销申请", 0), m("VPN", "虚拟专用网", 0)},
			"办公自动化系统 里的费用报销申请和 虚拟专用网"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ApplyTermMappings(tt.q, tt.mappings); got != tt.want {
				t.Fatalf("ApplyTermMappings(%q) = %q, want %q", tt.q, got, tt.want)
			}
			// The result does not depend on the order of the mappings.
			rev := make([]TermMapping, len(tt.mappings))
			for i, mm := range tt.mappings {
				rev[len(rev)-1-i] = mm
			}
			if got := ApplyTermMappings(tt.q, rev); got != tt.want {
				t.Fatalf("reversed mappings: %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildIntentTree(t *testing.T) {
	nodes := []*IntentNode{
		{ID: 5, ParentID: 1, Name: "VPN", Sort: 2},
		{ID: 1, Name: "IT support"},
		{ID: 4, ParentID: 1, Name: "Printer", Sort: 1},
		{ID: 7, ParentID: 5, Name: "Mac client"},
		{ID: 2, Name: "HR", Sort: -1},
		{ID: 9, ParentID: 404, Name: "Orphan"},
	}
	roots := BuildIntentTree(nodes)
	var got []string
	var walk func(ns []*IntentNode)
	walk = func(ns []*IntentNode) {
		for _, n := range ns {
			got = append(got, n.Path)
			walk(n.Children)
		}
	}
	walk(roots)
	want := "HR|IT support|IT support > Printer|IT support > VPN|IT support > VPN > Mac client|Orphan"
	if strings.Join(got, "|") != want {
		t.Fatalf("paths %q, want %q", strings.Join(got, "|"), want)
	}

	t.Run("cycle is cut", func(t *testing.T) {
		cyc := []*IntentNode{{ID: 1, ParentID: 2, Name: "a"}, {ID: 2, ParentID: 1, Name: "b"}, {ID: 3, ParentID: 3, Name: "self"}}
		roots := BuildIntentTree(cyc)
		if _, err := json.Marshal(roots); err != nil {
			t.Fatal(err)
		}
		n := 0
		var count func(ns []*IntentNode)
		count = func(ns []*IntentNode) {
			for _, x := range ns {
				n++
				count(x.Children)
			}
		}
		count(roots)
		if n != 3 {
			t.Fatalf("%d nodes reachable, want 3", n)
		}
	})

	t.Run("empty", func(t *testing.T) {
		if b, _ := json.Marshal(BuildIntentTree(nil)); string(b) != "[]" {
			t.Fatalf("empty tree encodes as %s, want []", b)
		}
	})
}
