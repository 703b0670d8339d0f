package text

import (
	"reflect"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", []string{}},
		{"only space and punctuation", "  ,.;!? \t\n — ", []string{}},
		{"english with stop words and stemming", "The cats are running to the houses",
			[]string{"cat", "run", "hous"}},
		{"case folding", "BRCA1 Mutations", []string{"brca1", "mutat"}},
		{"possessive dropped", "the protein's role, Alzheimer’s disease",
			[]string{"protein", "role", "alzheim", "diseas"}},
		{"hyphen and decimal split", "covid-19 at 0.5 mg", []string{"covid", "19", "0", "5", "mg"}},
		{"chinese bigrams", "泡泡战士", []string{"泡泡", "泡战", "战士"}},
		{"single chinese character", "水", []string{"水"}},
		{"chinese punctuation separates runs", "中国，大陆。台湾！",
			[]string{"中国", "大陆", "台湾"}},
		{"one-character runs between punctuation", "甲、乙", []string{"甲", "乙"}},
		{"mixed chinese and latin", "由韩国Nexon开发2018年",
			[]string{"由韩", "韩国", "nexon", "开发", "2018", "年"}},
		{"full-width latin and digits folded", "ＧＰＴ４　模型",
			[]string{"gpt4", "模型"}},
		{"japanese kana", "カタカナとひらがな",
			[]string{"カタ", "タカ", "カナ", "ナと", "とひ", "ひら", "らが", "がな"}},
		{"katakana prolonged sound mark", "データ", []string{"デー", "ータ"}},
		{"hangul", "한국어", []string{"한국", "국어"}},
		{"emoji separates", "good👍news🎉", []string{"good", "new"}},
		{"non-ascii latin letters kept and lowered", "Café Über", []string{"café", "über"}},
		{"cyrillic", "Привет мир", []string{"привет", "мир"}},
		{"invalid utf-8 separates", "abc\xffdef", []string{"abc", "def"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Tokenize(tt.in)
			if got == nil {
				t.Fatal("Tokenize returned nil, want an empty slice")
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Tokenize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTokenizeQueryMatchesDocument(t *testing.T) {
	// Stemming must send inflections of a word to the same term, or a query
	// would miss documents that use another form.
	groups := [][]string{
		{"connect", "connected", "connecting", "connection", "connections"},
		{"mutation", "mutations", "mutated"},
		{"study", "studies"},
		{"activate", "activates", "activated", "activation"},
	}
	for _, g := range groups {
		want := Tokenize(g[0])
		for _, w := range g[1:] {
			if got := Tokenize(w); !reflect.DeepEqual(got, want) {
				t.Errorf("Tokenize(%q) = %q, want %q like %q", w, got, want, g[0])
			}
		}
	}
}

func TestStem(t *testing.T) {
	// Expected outputs from Porter's published vocabulary and paper.
	tests := map[string]string{
		"caresses": "caress", "ponies": "poni", "ties": "ti", "caress": "caress", "cats": "cat",
		"feed": "feed", "agreed": "agre", "plastered": "plaster", "bled": "bled",
		"motoring": "motor", "sing": "sing", "conflated": "conflat", "troubled": "troubl",
		"sized": "size", "hopping": "hop", "tanned": "tan", "falling": "fall",
		"hissing": "hiss", "fizzed": "fizz", "failing": "fail", "filing": "file",
		"happy": "happi", "sky": "sky", "relational": "relat", "conditional": "condit",
		"rational": "ration", "valenci": "valenc", "hesitanci": "hesit", "digitizer": "digit",
		"conformabli": "conform", "radicalli": "radic", "differentli": "differ", "vileli": "vile",
		"analogousli": "analog", "vietnamization": "vietnam", "predication": "predic",
		"operator": "oper", "feudalism": "feudal", "decisiveness": "decis",
		"hopefulness": "hope", "callousness": "callous", "formaliti": "formal",
		"sensitiviti": "sensit", "sensibiliti": "sensibl", "triplicate": "triplic",
		"formative": "form", "formalize": "formal", "electriciti": "electr",
		"electrical": "electr", "hopeful": "hope", "goodness": "good", "revival": "reviv",
		"allowance": "allow", "inference": "infer", "airliner": "airlin",
		"gyroscopic": "gyroscop", "adjustable": "adjust", "defensible": "defens",
		"irritant": "irrit", "replacement": "replac", "adjustment": "adjust",
		"dependent": "depend", "adoption": "adopt", "homologou": "homolog",
		"communism": "commun", "activate": "activ", "angulariti": "angular",
		"homologous": "homolog", "effective": "effect", "bowdlerize": "bowdler",
		"probate": "probat", "rate": "rate", "cease": "ceas", "controll": "control",
		"roll": "roll", "generalization": "gener", "oscillators": "oscil",
		"as": "as", "is": "is", "abc123": "abc123", "naïve": "naïve",
	}
	for in, want := range tests {
		if got := string(stem([]byte(in))); got != want {
			t.Errorf("stem(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStemNeverPanicsOrGrows(t *testing.T) {
	// Short, vowel-less and pathological suffix-only words exercise the
	// index arithmetic at the edges.
	words := []string{"s", "ss", "sss", "ies", "eed", "ing", "ed", "y", "yy", "yyy", "ational",
		"ization", "bbbbbbed", "aing", "ying", "eeing", "ousness", "e", "ee", "eee", "ll", "lll"}
	for _, w := range words {
		got := stem([]byte(w))
		if len(got) > len(w) || len(got) == 0 {
			t.Errorf("stem(%q) = %q", w, got)
		}
	}
}

func TestSentences(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"whitespace only", " \n\t ", nil},
		{"english", "One. Two! Three? Four", []string{"One.", "Two!", "Three?", "Four"}},
		{"decimals and dotted names stay whole", "Pi is 3.14 in node.js. Next.",
			[]string{"Pi is 3.14 in node.js.", "Next."}},
		{"chinese without spaces", "今天下雨。我们去哪里？不知道！好；走吧",
			[]string{"今天下雨。", "我们去哪里？", "不知道！", "好；", "走吧"}},
		{"ellipsis and runs of terminators", "等等……真的吗？！是的", []string{"等等……", "真的吗？！", "是的"}},
		{"closing quotes stay", `他说：“好。”然后走了。He said "yes." Then left.`,
			[]string{"他说：“好。”", "然后走了。", `He said "yes."`, "Then left."}},
		{"blank line ends a sentence", "Heading without stop\n\nBody text", []string{"Heading without stop", "Body text"}},
		{"single newline does not", "line one\nline two.", []string{"line one\nline two."}},
		{"mixed", "BM25 works. 中文也可以。", []string{"BM25 works.", "中文也可以。"}},
		{"emoji", "Great 🎉! Next", []string{"Great 🎉!", "Next"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Sentences(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Sentences(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSentencesLoseNoText(t *testing.T) {
	in := "A first. 第二句。Third one?! 第四……\n\nlast"
	joined := strings.Join(Sentences(in), "")
	strip := func(s string) string { return strings.Join(strings.Fields(s), "") }
	if strip(joined) != strip(in) {
		t.Errorf("sentences joined = %q, want the input's text %q", joined, in)
	}
}

func TestCountTokens(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"empty", "", 0},
		{"spaces", "   \n", 0},
		{"one word", "hello", 2},
		{"ten short words", "the cat sat on the mat and ate a rat", 13},
		{"long word costs more", "internationalization", 5},
		{"chinese one per character", "中文分词", 4},
		{"punctuation", "你好，世界！", 6},
		{"mixed", "Go语言", 4},
		{"emoji", "🎉", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CountTokens(tt.in); got != tt.want {
				t.Errorf("CountTokens(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "hello world", "中文分词测试", "ＡＢＣ１２３", "a\xffb", "it's", "'s", "s'", "🎉中"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, term := range Tokenize(s) {
			if term == "" {
				t.Fatalf("Tokenize(%q) produced an empty term", s)
			}
		}
		for _, sent := range Sentences(s) {
			if strings.TrimSpace(sent) == "" {
				t.Fatalf("Sentences(%q) produced an empty sentence", s)
			}
		}
		if CountTokens(s) < 0 {
			t.Fatalf("CountTokens(%q) < 0", s)
		}
	})
}

var benchText = strings.Repeat("Recombinant human erythropoietin improves outcomes in patients with chronic kidney disease. "+
	"重组人促红细胞生成素可以改善慢性肾病患者的预后，并减少输血需求。", 50)

func BenchmarkTokenize(b *testing.B) {
	b.SetBytes(int64(len(benchText)))
	b.ReportAllocs()
	for b.Loop() {
		Tokenize(benchText)
	}
}

func BenchmarkCountTokens(b *testing.B) {
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		CountTokens(benchText)
	}
}

func BenchmarkSentences(b *testing.B) {
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		Sentences(benchText)
	}
}

// A word longer than MaxTermBytes is dropped whole (never truncated into a
// term that matches unrelated words) and the words around it survive; the
// limit counts bytes, so it holds for multi-byte letters too.
func TestTokenizeDropsOverlongWords(t *testing.T) {
	atLimit := strings.Repeat("x", MaxTermBytes)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"40,000 letters", "alpha " + strings.Repeat("q", 40_000) + " omega", []string{"alpha", "omega"}},
		{"at the limit kept", "alpha " + atLimit, []string{"alpha", atLimit}},
		{"one byte over dropped", atLimit + "y beta", []string{"beta"}},
		{"sha512 hex kept", strings.Repeat("0123456789abcdef", 8), []string{strings.Repeat("0123456789abcdef", 8)}},
		{"multi-byte letters over the limit", "ж" + strings.Repeat("é", MaxTermBytes/2) + " gamma", []string{"gamma"}},
		{"apostrophe after an overlong word", strings.Repeat("z", 500) + "'s delta", []string{"delta"}},
		{"cjk next to an overlong word", strings.Repeat("k", 300) + "中文", []string{"中文"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Tokenize(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Tokenize = %q, want %q", got, tt.want)
			}
			for _, term := range got {
				if len(term) > MaxTermBytes {
					t.Fatalf("term of %d bytes", len(term))
				}
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc…"},
		{"检索增强", 4, "检…"}, // 4 bytes end inside the second character
	}
	for _, tt := range tests {
		if got := Truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
