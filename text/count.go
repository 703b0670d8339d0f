package text

import (
	"unicode"
	"unicode/utf8"
)

// CountTokens approximates how many tokens an LLM tokenizer (BPE, as in the
// GPT and Qwen families) would produce for s. It is used to size chunks, so it
// must be cheap and roughly right, not exact: a CJK character counts as one
// token, a Latin word as about 1.3 (long words more: one token per ~4
// letters), and each other visible symbol (punctuation, emoji) as one.
func CountTokens(s string) int {
	// Work in tenths of a token to keep 1.3 per word exact without floats.
	tenths := 0
	wordLen := 0
	endWord := func() {
		if wordLen == 0 {
			return
		}
		if t := wordLen * 10 / 4; t > 13 {
			tenths += t
		} else {
			tenths += 13
		}
		wordLen = 0
	}
	for _, r := range s {
		r = foldWidth(r)
		switch {
		case r < utf8.RuneSelf && isASCIIAlnum(byte(r)):
			wordLen++
		case IsCJK(r):
			endWord()
			tenths += 10
		case r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			wordLen++
		case unicode.IsSpace(r):
			endWord()
		default:
			endWord()
			tenths += 10
		}
	}
	endWord()
	return (tenths + 9) / 10
}
