package ingest

import (
	"testing"

	"github.com/ragent-go/ragent/service/ingest/parse"
)

func TestIndexTextAddsTheSectionToLaterChunks(t *testing.T) {
	first := parse.Chunk{Section: "VPN > 故障", Content: "故障\n如果 VPN 连不上，请重启客户端。"}
	later := parse.Chunk{Section: "VPN > 故障", Content: "仍然失败时请提交工单。"}
	none := parse.Chunk{Content: "plain text"}
	if got := indexText(first); got != first.Content {
		t.Errorf("first chunk of a section: %q", got)
	}
	if got := indexText(later); got != "VPN > 故障\n仍然失败时请提交工单。" {
		t.Errorf("later chunk: %q", got)
	}
	if got := indexText(none); got != "plain text" {
		t.Errorf("no section: %q", got)
	}
}

func TestIndexTextKnowsFirstChunksFromSplit(t *testing.T) {
	parsed := &parse.Text{Blocks: []parse.Block{
		{Kind: parse.Heading, Level: 1, Text: "VPN"},
		{Kind: parse.Heading, Level: 2, Text: "故障"},
		{Kind: parse.Paragraph, Text: "如果 VPN 连不上，请重启客户端。"},
	}}
	chunks := parse.Split(parsed, parse.DefaultChunkOptions())
	if len(chunks) != 1 || indexText(chunks[0]) != chunks[0].Content {
		t.Fatalf("a first chunk carries its headings already: %+v → %q", chunks, indexText(chunks[0]))
	}
}
