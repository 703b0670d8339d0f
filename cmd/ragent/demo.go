package main

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/ingest"
)

// demoDocs are the documents of the demo knowledge base.
//
//go:embed demo/*.md
var demoDocs embed.FS

// demoSetting records in `settings` that the demo data was loaded, so it is
// loaded once per database even when an admin deletes it afterwards.
const demoSetting = "demo.loaded"

type demoServices struct {
	kbs     *admin.KnowledgeBases
	ingest  *ingest.Service
	intents *admin.Intents
	terms   *admin.Terms
}

// settingStore reads and writes first-start state.
type settingStore interface {
	Setting(ctx context.Context, key string) (string, error)
	SettingOrCreate(ctx context.Context, key, value string) (string, error)
}

// seedDemo loads a small knowledge base (documents go through the normal
// ingestion pipeline), an intent tree routing to it and a few term mappings,
// so a newcomer can ask a question at once. It runs under the startup lock.
func seedDemo(ctx context.Context, settings settingStore, s demoServices, log *slog.Logger) error {
	if _, err := settings.Setting(ctx, demoSetting); err == nil {
		return nil
	} else if !errors.Is(err, service.ErrNotFound) {
		return err
	}
	name, desc := "ragent 演示知识库", "Demo: how to use ragent, the SLS log service FAQ and IT support (VPN, passwords)."
	kb, err := s.kbs.Create(ctx, admin.KnowledgeBaseInput{Name: &name, Description: &desc})
	if err != nil {
		return fmt.Errorf("knowledge base: %w", err)
	}
	files, err := fs.Glob(demoDocs, "demo/*.md")
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := demoDocs.ReadFile(f)
		if err != nil {
			return err
		}
		if _, err := s.ingest.Upload(ctx, kb.ID, f[len("demo/"):], bytes.NewReader(b)); err != nil {
			return fmt.Errorf("upload %s: %w", f, err)
		}
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
		}
		created, err := s.intents.Create(ctx, in)
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
		if _, err := s.terms.Create(ctx, admin.TermInput{SourceTerm: m[0], TargetTerm: m[1], Enabled: &enabled}); err != nil {
			return fmt.Errorf("term mapping %s: %w", m[0], err)
		}
	}
	if _, err := settings.SettingOrCreate(ctx, demoSetting, kb.ID.String()); err != nil {
		return err
	}
	log.Info("loaded the demo knowledge base, intents and term mappings", "knowledge_base", kb.ID, "documents", len(files))
	return nil
}
