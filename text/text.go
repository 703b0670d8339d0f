// Package text turns natural-language text into the units the rest of ragent
// reasons about: search terms for BM25 and the offline embedder, sentences for
// chunking, and an approximate LLM token count for chunk sizing.
//
// It is CJK-aware because a whitespace tokenizer finds almost nothing in
// Chinese or Japanese: runs of Han, Hiragana, Katakana and Hangul become
// overlapping character bigrams (a one-character run stays a single term),
// which needs no dictionary and retrieves Chinese well. Latin words are
// lower-cased, English stop words dropped and the rest Porter-stemmed.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxTermBytes is the longest word, in bytes of its lower-cased UTF-8 form
// before stemming, that becomes a term. Longer words are dropped, as
// Lucene's standard tokenizer drops tokens over its limit: such a "word" is
// a base64 blob, a minified line or a hostile file, never something a person
// searches for, and an unbounded term would not fit a Postgres index row
// (about 2.7 KB). 128 bytes keeps a SHA-512 in hex, long compound words and
// identifiers. Queries are tokenized by the same rule, so nothing that was
// indexed is unreachable.
const MaxTermBytes = 128

// Tokenize returns the search terms of s in order of appearance, duplicates
// included (BM25 needs term frequencies). Words longer than MaxTermBytes are
// dropped.
//
// Full-width Latin letters and digits are folded to ASCII first, so "ＧＰＴ４"
// and "GPT4" match. Any rune that is neither a letter, a digit nor CJK
// (punctuation of either width, symbols, emoji, spaces) separates terms.
func Tokenize(s string) []string {
	// Roughly one term per five bytes of English and per CJK rune (three
	// bytes); sizing once avoids most slice growth.
	terms := make([]string, 0, len(s)/5+1)
	word := make([]byte, 0, 32) // the current Latin/digit word, lower-cased
	tooLong := false            // the word grew past MaxTermBytes: it stops growing and is dropped
	var cjk [2]rune             // the last two runes of the current CJK run
	runLen := 0                 // runes in the current CJK run
	var buf [8]byte             // encodes a CJK term before its one allocation
	flushWord := func() {
		if len(word) == 0 {
			return
		}
		if !tooLong {
			if t, ok := normalizeWord(word); ok {
				terms = append(terms, t)
			}
		}
		word, tooLong = word[:0], false
	}
	// appendRune adds a non-ASCII rune to the current word, or marks the word
	// too long instead of growing it past the limit.
	appendRune := func(r rune) {
		if len(word)+utf8.RuneLen(r) > MaxTermBytes {
			tooLong = true
			return
		}
		word = utf8.AppendRune(word, r)
	}
	flushRun := func() {
		if runLen == 1 {
			n := utf8.EncodeRune(buf[:], cjk[1])
			terms = append(terms, string(buf[:n]))
		}
		runLen = 0
	}

	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		i += size
		r = foldWidth(r)

		switch {
		case r < utf8.RuneSelf && isASCIIAlnum(byte(r)):
			flushRun()
			c := byte(r)
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if len(word) < MaxTermBytes {
				word = append(word, c)
			} else {
				tooLong = true
			}
		case r == '\'' || r == '’':
			// An apostrophe inside a word ends it; a following possessive
			// "s" ("protein's") is dropped, as Lucene's English analyzer does.
			flushRun()
			if len(word) > 0 && i < len(s) && (s[i] == 's' || s[i] == 'S') && (i+1 == len(s) || !isWordByte(s[i+1])) {
				i++
			}
			flushWord()
		case IsCJK(r):
			flushWord()
			cjk[0], cjk[1] = cjk[1], r
			runLen++
			if runLen >= 2 {
				n := utf8.EncodeRune(buf[:], cjk[0])
				n += utf8.EncodeRune(buf[n:], cjk[1])
				terms = append(terms, string(buf[:n]))
			}
		case r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			// Non-ASCII letters of alphabetic scripts (é, ß, Cyrillic, Greek)
			// belong to the word; combining marks are not letters and split,
			// which is acceptable for search terms.
			flushRun()
			appendRune(unicode.ToLower(r))
		case r >= utf8.RuneSelf && unicode.Is(unicode.Mn, r) && len(word) > 0:
			appendRune(r)
		default:
			flushWord()
			flushRun()
		}
	}
	flushWord()
	flushRun()
	return terms
}

// normalizeWord applies stop words and stemming to a lower-cased word.
func normalizeWord(w []byte) (string, bool) {
	if isStopWord(w) {
		return "", false
	}
	return string(stem(w)), true
}

func isASCIIAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isWordByte(c byte) bool {
	return isASCIIAlnum(c) || c >= utf8.RuneSelf
}

// foldWidth maps full-width ASCII variants (U+FF01–U+FF5E) and the
// ideographic space to their ASCII forms: the NFKC folding that matters for
// mixed Chinese/Latin text, without NFKC's cost on every rune.
func foldWidth(r rune) rune {
	switch {
	case r >= 0xFF01 && r <= 0xFF5E:
		return r - 0xFEE0
	case r == 0x3000:
		return ' '
	}
	return r
}

// IsCJK reports whether r belongs to a script written without spaces between
// words — Han, Hiragana, Katakana or Hangul — and is therefore tokenized as
// character bigrams.
func IsCJK(r rune) bool {
	switch {
	case r < 0x1100:
		return false
	case r >= 0x4E00 && r <= 0x9FFF, r >= 0x3040 && r <= 0x30FF, r >= 0xAC00 && r <= 0xD7A3:
		// The CJK Unified Ideographs, kana and Hangul syllable blocks: almost
		// every CJK rune, answered without the script tables.
		return true
	}
	if r == 0x30FC { // the Katakana prolonged sound mark is in the Common script
		return true
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

// Truncate shortens s to at most n bytes plus "…", never cutting a UTF-8
// sequence in two; s of n bytes or fewer is returned as it is.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
