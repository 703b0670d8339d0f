package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sentences splits s into sentences, each keeping its closing punctuation
// and trimmed of surrounding space; it never returns empty strings.
//
// Chinese and full-width terminators (。！？；… and full-width ！？；) end a
// sentence wherever they appear, since Chinese puts no space after them.
// ASCII . ! ? end one only when followed by white space or the end of the
// text, so "3.14", "e.g.x" and "node.js" stay whole. A run of terminators
// ("?!", "……") and closing quotes or brackets after them stay with the
// sentence they close. Line breaks inside a sentence are kept; a blank line
// ends a sentence, because it separates paragraphs.
func Sentences(s string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if t := strings.TrimSpace(s[start:end]); t != "" {
			out = append(out, t)
		}
		start = end
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case isCJKTerminator(r):
			end := skipClosers(s, skipTerminators(s, i+size))
			emit(end)
			i = end
			continue
		case r == '.' || r == '!' || r == '?':
			end := skipClosers(s, skipTerminators(s, i+size))
			if end == len(s) || startsWithSpace(s[end:]) {
				emit(end)
				i = end
				continue
			}
			i = end
			continue
		case r == '\n':
			if j := blankLineEnd(s, i); j > 0 {
				emit(i)
				i = j
				continue
			}
		}
		i += size
	}
	emit(len(s))
	return out
}

func isCJKTerminator(r rune) bool {
	switch r {
	case '。', '！', '？', '；', '…', '．':
		return true
	}
	return false
}

// skipTerminators returns the index after any further terminators at i.
func skipTerminators(s string, i int) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != '.' && r != '!' && r != '?' && !isCJKTerminator(r) {
			return i
		}
		i += size
	}
	return i
}

// skipClosers returns the index after closing quotes and brackets at i.
func skipClosers(s string, i int) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '"', '\'', ')', ']', '”', '’', '」', '』', '）', '】', '》', '〉':
			i += size
		default:
			return i
		}
	}
	return i
}

func startsWithSpace(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsSpace(r)
}

// blankLineEnd reports where the blank line starting at the newline s[i]
// ends, or 0 if the next line is not blank.
func blankLineEnd(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case ' ', '\t', '\r':
		case '\n':
			return j + 1
		default:
			return 0
		}
	}
	return 0
}
