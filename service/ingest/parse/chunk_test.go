package parse

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/text"
)

func TestSplitStructure(t *testing.T) {
	doc := &Text{Blocks: []Block{
		p("Preface before any heading."),
		h(1, "Guide"),
		h(2, "Install"),
		p("Run the installer."),
		li("Linux: use the package."),
		h(2, "使用"),
		p("打开应用。"),
		h(1, "Reference"),
		tr("name: x; value: 1"),
	}}
	got := Split(doc, ChunkOptions{TargetTokens: 100, OverlapTokens: 10})
	want := []Chunk{
		{Content: "Preface before any heading.", Section: ""},
		{Content: "Guide\nInstall\nRun the installer.\nLinux: use the package.", Section: "Guide > Install"},
		{Content: "使用\n打开应用。", Section: "Guide > 使用"},
		{Content: "Reference\nname: x; value: 1", Section: "Reference"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d chunks %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].Ordinal != i || got[i].Content != want[i].Content || got[i].Section != want[i].Section {
			t.Errorf("chunk %d = %+v, want %+v", i, got[i], want[i])
		}
		if got[i].TokenCount != text.CountTokens(got[i].Content) {
			t.Errorf("chunk %d TokenCount = %d, want %d", i, got[i].TokenCount, text.CountTokens(got[i].Content))
		}
	}
}

func TestSplitPacksBlocksAndOverlaps(t *testing.T) {
	var blocks []Block
	for i := range 20 {
		blocks = append(blocks, p(fmt.Sprintf("Paragraph %d says something. It ends here %d.", i, i)))
	}
	got := Split(&Text{Blocks: blocks}, ChunkOptions{TargetTokens: 60, OverlapTokens: 10})
	if len(got) < 3 {
		t.Fatalf("got %d chunks, want several", len(got))
	}
	for i, c := range got {
		if c.TokenCount > 60 {
			t.Errorf("chunk %d has %d tokens, target 60", i, c.TokenCount)
		}
		if i > 0 {
			// The previous chunk's last sentence opens this one.
			prev := text.Sentences(got[i-1].Content)
			last := prev[len(prev)-1]
			if !strings.HasPrefix(c.Content, last) {
				t.Errorf("chunk %d = %q does not start with the overlap %q", i, c.Content, last)
			}
		}
	}
	// Every paragraph appears whole in some chunk.
	for _, b := range blocks {
		found := false
		for _, c := range got {
			if strings.Contains(c.Content, b.Text) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("paragraph %q was split or lost", b.Text)
		}
	}
}

func TestSplitLongBlocks(t *testing.T) {
	chinese := strings.Repeat("检索增强生成把文档切成小块。模型只看到相关的内容！这样回答更准确？是的；", 20)
	english := strings.Repeat("Retrieval augmented generation splits documents into chunks. ", 40)
	noPunct := strings.Repeat("没有标点的长句子", 100)
	giantWord := strings.Repeat("x", 5000)
	tests := []struct {
		name string
		text string
	}{
		{"chinese sentences", chinese},
		{"english sentences", english},
		{"chinese without punctuation", noPunct},
		{"one giant word", giantWord},
		{"code", strings.Repeat("fmt.Println(\"line\")\n", 200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind := Paragraph
			if tt.name == "code" {
				kind = Code
			}
			const target = 50
			got := Split(&Text{Blocks: []Block{{Kind: kind, Text: tt.text}}}, ChunkOptions{TargetTokens: target, OverlapTokens: 0})
			if len(got) < 2 {
				t.Fatalf("got %d chunks, want the block split", len(got))
			}
			var all strings.Builder
			for i, c := range got {
				if c.TokenCount > target || c.TokenCount == 0 || strings.TrimSpace(c.Content) == "" {
					t.Errorf("chunk %d has %d tokens: %q", i, c.TokenCount, c.Content)
				}
				all.WriteString(c.Content)
			}
			// Nothing is lost: without overlap the chunks hold the block's
			// text once, give or take white space.
			strip := func(s string) string { return strings.Join(strings.Fields(s), "") }
			if strip(all.String()) != strip(tt.text) {
				t.Errorf("chunks do not reassemble the block")
			}
			if tt.name == "chinese sentences" {
				for i, c := range got {
					r := []rune(c.Content)
					if last := r[len(r)-1]; !strings.ContainsRune("。！？；", last) {
						t.Errorf("chunk %d ends mid-sentence: %q", i, c.Content)
					}
				}
			}
		})
	}
}

func TestSplitEdgeCases(t *testing.T) {
	if got := Split(&Text{}, DefaultChunkOptions()); len(got) != 0 {
		t.Errorf("empty document: %+v", got)
	}
	got := Split(&Text{Blocks: []Block{h(1, "Only a heading")}}, ChunkOptions{})
	if len(got) != 1 || got[0].Content != "Only a heading" || got[0].Section != "Only a heading" {
		t.Errorf("heading-only document: %+v", got)
	}
	// Overlap larger than the target is clamped instead of looping.
	got = Split(&Text{Blocks: []Block{p(strings.Repeat("A sentence here. ", 50))}}, ChunkOptions{TargetTokens: 20, OverlapTokens: 100})
	for i, c := range got {
		if c.TokenCount > 20 {
			t.Errorf("chunk %d has %d tokens", i, c.TokenCount)
		}
	}
}

func TestSplitParsedDocument(t *testing.T) {
	md := "# 手册\n\n## 安装\n\n" + strings.Repeat("下载安装包并运行。", 80) + "\n\n## Usage\n\n" + strings.Repeat("Open the app and sign in. ", 60)
	doc, err := parseBytes(t, []byte(md), MimeMarkdown, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	chunks := Split(doc, DefaultChunkOptions())
	sections := map[string]int{}
	for _, c := range chunks {
		sections[c.Section]++
		if c.TokenCount > 512 {
			t.Errorf("chunk %d has %d tokens", c.Ordinal, c.TokenCount)
		}
	}
	if sections["手册 > 安装"] < 2 || sections["手册 > Usage"] < 1 || len(sections) != 2 {
		t.Errorf("sections = %v", sections)
	}
}

func BenchmarkSplit(b *testing.B) {
	var blocks []Block
	for i := range 200 {
		blocks = append(blocks, h(2, fmt.Sprintf("Section %d", i)),
			p(strings.Repeat("Retrieval augmented generation splits documents. 检索增强生成把文档切成小块。", 10)))
	}
	doc := &Text{Blocks: blocks}
	b.ReportAllocs()
	for b.Loop() {
		Split(doc, DefaultChunkOptions())
	}
}

// A chunk says it was read by OCR when its blocks were, whatever its
// section says: a heading ending in "(OCR)" does not make a chunk OCR'd.
func TestSplitMarksOCRChunks(t *testing.T) {
	scanned := p("Read from the scan.")
	scanned.Page, scanned.OCR = 2, true
	doc := &Text{Blocks: []Block{h(1, "Scanner setup (OCR)"), p("Typed text."), scanned}}
	got := Split(doc, ChunkOptions{TargetTokens: 100})
	if len(got) != 2 {
		t.Fatalf("got %d chunks %+v, want 2", len(got), got)
	}
	if got[0].OCR || got[0].Section != "Scanner setup (OCR)" {
		t.Errorf("typed chunk %+v, want not OCR", got[0])
	}
	if !got[1].OCR || got[1].Section != "Scanner setup (OCR) > Page 2 (OCR)" {
		t.Errorf("scanned chunk %+v, want OCR on page 2", got[1])
	}
}
