// Package demo loads the demo data on a first start: two small knowledge
// bases whose documents go through the normal ingestion pipeline, an intent
// tree routing to them and a few term mappings.
package demo

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/ingest"
)

// docs are the documents of the demo knowledge bases: docs/*.md go to the
// internal one, docs/private/*.md to the private one.
//
//go:embed docs/*.md docs/private/*.md
var docs embed.FS

// setting records in `settings` that the demo data was loaded, so it is
// loaded once per database even when an admin deletes it afterwards.
const setting = "demo.loaded"

// Services are the use cases the demo data is created through.
type Services struct {
	KnowledgeBases *admin.KnowledgeBases
	Ingest         *ingest.Service
	Intents        *admin.Intents
	Terms          *admin.Terms
}

// Settings reads and writes first-start state.
type Settings interface {
	Setting(ctx context.Context, key string) (string, error)
	SettingOrCreate(ctx context.Context, key, value string) (string, error)
}

// Seed loads two small knowledge bases (documents go through the normal
// ingestion pipeline), an intent tree routing to them and a few term
// mappings, so a newcomer can ask a question at once. The product FAQ is
// internal (every user reads it); the HR handbook is private (admins and
// the members they add), to show the access model. It runs under the
// startup lock.
func Seed(ctx context.Context, settings Settings, s Services, log *slog.Logger) error {
	if _, err := settings.Setting(ctx, setting); err == nil {
		return nil
	} else if !errors.Is(err, service.ErrNotFound) {
		return err
	}
	kb, files, err := seedKnowledgeBase(ctx, s, "ragent 演示知识库",
		"Demo: how to use ragent, the SLS log service FAQ and IT support (VPN, passwords).",
		service.VisibilityInternal, "docs/*.md")
	if err != nil {
		return err
	}
	hr, hrFiles, err := seedKnowledgeBase(ctx, s, "HR 手册（私有演示）",
		"Demo of a private knowledge base: visible to admins and the users or groups added as members.",
		service.VisibilityPrivate, "docs/private/*.md")
	if err != nil {
		return err
	}

	type node struct {
		code, name, desc string
		kind             service.IntentKind
		examples         []string
		children         []node
	}
	tree := []node{
		{code: "product", name: "产品使用", desc: "How to use ragent: asking, queueing, stopping, uploading", kind: service.IntentKB, children: []node{
			{code: "product.chat", name: "提问与排队", desc: "asking questions, citations, the fair queue, stopping an answer", kind: service.IntentKB,
				examples: []string{"为什么要排队", "怎么停止生成", "回答里的 [1] 是什么意思", "why do I have to wait in a queue"}},
			{code: "product.upload", name: "上传文档", desc: "uploading documents, supported formats, document status", kind: service.IntentKB,
				examples: []string{"支持哪些文件格式", "文档一直处理中怎么办", "how do I upload a document"}},
		}},
		{code: "it", name: "IT 支持", desc: "IT support", kind: service.IntentKB, children: []node{
			{code: "it.vpn", name: "VPN", desc: "connecting to the VPN and fixing connection problems", kind: service.IntentKB,
				examples: []string{"VPN 连不上", "how do I connect to the VPN", "GlobalProtect certificate expired"}},
			{code: "it.logs", name: "SLS 日志服务", desc: "SLS log service: onboarding, retention, alerts", kind: service.IntentKB,
				examples: []string{"日志保留多久", "怎么配置日志告警", "SLS 怎么接入"}},
		}},
		{code: "hr", name: "人事 HR", desc: "annual leave, payroll and other HR policies (private knowledge base)", kind: service.IntentKB,
			examples: []string{"年假有几天", "工资几号发", "how many days of annual leave"}},
		{code: "chitchat", name: "闲聊", desc: "greetings and small talk, answered without documents", kind: service.IntentSystem,
			examples: []string{"你好", "谢谢", "hello", "thank you"}},
	}
	var create func(parent service.ID, n node) error
	create = func(parent service.ID, n node) error {
		enabled := true
		in := admin.IntentInput{
			ParentID: parent, Code: n.code, Name: n.name, Description: n.desc, Kind: n.kind, Examples: n.examples, Enabled: &enabled,
		}
		if n.kind == service.IntentKB {
			in.KnowledgeBaseIDs = []service.ID{kb.ID}
			if n.code == "hr" {
				in.KnowledgeBaseIDs = []service.ID{hr.ID}
			}
		}
		created, err := s.Intents.Create(ctx, in)
		if err != nil {
			return fmt.Errorf("intent %s: %w", n.code, err)
		}
		for _, c := range n.children {
			if err := create(created.ID, c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range tree {
		if err := create(0, n); err != nil {
			return err
		}
	}

	for _, m := range [][2]string{
		{"那个打日志的", "SLS 日志服务"},
		{"打日志的那个系统", "SLS 日志服务"},
		{"GP 客户端", "GlobalProtect 客户端"},
	} {
		enabled := true
		if _, err := s.Terms.Create(ctx, admin.TermInput{SourceTerm: m[0], TargetTerm: m[1], Enabled: &enabled}); err != nil {
			return fmt.Errorf("term mapping %s: %w", m[0], err)
		}
	}
	if _, err := settings.SettingOrCreate(ctx, setting, kb.ID.String()); err != nil {
		return err
	}
	log.Info("loaded the demo knowledge bases, intents and term mappings",
		"internal_knowledge_base", kb.ID, "private_knowledge_base", hr.ID, "documents", files+hrFiles)
	return nil
}

// seedKnowledgeBase creates one demo knowledge base and uploads the files
// matching pattern into it; it returns the knowledge base and the number of
// files.
func seedKnowledgeBase(ctx context.Context, s Services, name, desc string, vis service.Visibility, pattern string) (*service.KnowledgeBase, int, error) {
	kb, err := s.KnowledgeBases.Create(ctx, service.SystemPrincipal(), admin.KnowledgeBaseInput{Name: &name, Description: &desc, Visibility: &vis})
	if err != nil {
		return nil, 0, fmt.Errorf("knowledge base %s: %w", name, err)
	}
	files, err := fs.Glob(docs, pattern)
	if err != nil {
		return nil, 0, err
	}
	for _, f := range files {
		b, err := docs.ReadFile(f)
		if err != nil {
			return nil, 0, err
		}
		if _, err := s.Ingest.Upload(ctx, service.SystemPrincipal(), kb.ID, path.Base(f), bytes.NewReader(b)); err != nil {
			return nil, 0, fmt.Errorf("upload %s: %w", f, err)
		}
	}
	return kb, len(files), nil
}
