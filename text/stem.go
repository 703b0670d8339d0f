package text

// stopWords is Lucene's English stop set (EnglishAnalyzer): small on purpose,
// because BM25's IDF already discounts common words and a long list drops
// terms that matter in claims ("not", "can", "more").
var stopWords = map[string]struct{}{
	"a": {}, "an": {}, "and": {}, "are": {}, "as": {}, "at": {}, "be": {}, "but": {},
	"by": {}, "for": {}, "if": {}, "in": {}, "into": {}, "is": {}, "it": {}, "no": {},
	"not": {}, "of": {}, "on": {}, "or": {}, "such": {}, "that": {}, "the": {},
	"their": {}, "then": {}, "there": {}, "these": {}, "they": {}, "this": {}, "to": {},
	"was": {}, "will": {}, "with": {},
}

func isStopWord(w []byte) bool {
	if len(w) > 5 {
		return false
	}
	_, ok := stopWords[string(w)] // no allocation: the compiler optimises map[string(b)]
	return ok
}

// stem reduces an English word to its Porter stem (M.F. Porter, 1980, as in
// his reference C implementation). Porter was chosen over a plural-only
// "minimal" stemmer because it retrieves better on the SciFact eval set (see
// the package tests). Words with digits or non-ASCII letters are returned
// unchanged: stemming "covid19" or "café" would only lose information.
// The slice is modified in place and may be shortened.
func stem(w []byte) []byte {
	if len(w) <= 2 {
		return w
	}
	for _, c := range w {
		if c < 'a' || c > 'z' {
			return w
		}
	}
	p := porter{b: w, k: len(w) - 1}
	p.step1ab()
	if p.k > 0 {
		p.step1c()
		p.step2()
		p.step3()
		p.step4()
		p.step5()
	}
	return p.b[:p.k+1]
}

// porter holds the word being stemmed: b[0..k] is the current word and j a
// general offset into it set by ends.
type porter struct {
	b    []byte
	k, j int
}

// cons reports whether b[i] is a consonant; 'y' is one unless it follows a
// consonant.
func (p *porter) cons(i int) bool {
	switch p.b[i] {
	case 'a', 'e', 'i', 'o', 'u':
		return false
	case 'y':
		return i == 0 || !p.cons(i-1)
	}
	return true
}

// m measures the number of consonant sequences in b[0..j]: for
// [C](VC)^m[V] it returns m.
func (p *porter) m() int {
	n := 0
	for i := p.next(0, false); i >= 0; i = p.next(i+1, false) {
		if i = p.next(i+1, true); i < 0 {
			break
		}
		n++
	}
	return n
}

// next returns the first index from i on, up to j, whose letter is a
// consonant when cons is true and a vowel otherwise; -1 when there is none.
func (p *porter) next(i int, cons bool) int {
	for ; i <= p.j; i++ {
		if p.cons(i) == cons {
			return i
		}
	}
	return -1
}

func (p *porter) vowelInStem() bool {
	for i := 0; i <= p.j; i++ {
		if !p.cons(i) {
			return true
		}
	}
	return false
}

func (p *porter) doubleC(j int) bool {
	return j >= 1 && p.b[j] == p.b[j-1] && p.cons(j)
}

// cvc reports whether b[i-2..i] is consonant-vowel-consonant with the last
// not w, x or y: the condition for restoring an "e" (hop(e), cav(e)).
func (p *porter) cvc(i int) bool {
	if i < 2 || !p.cons(i) || p.cons(i-1) || !p.cons(i-2) {
		return false
	}
	switch p.b[i] {
	case 'w', 'x', 'y':
		return false
	}
	return true
}

func (p *porter) ends(s string) bool {
	l := len(s)
	if l > p.k+1 || string(p.b[p.k-l+1:p.k+1]) != s {
		return false
	}
	p.j = p.k - l
	return true
}

// setTo replaces b[j+1..k] with s. A replacement is never longer than the
// suffix it replaces, except in step1ab ("at" → "ate" after removing "ed" or
// "ing"), where it grows into room the removed suffix freed; so the write
// always stays inside the original slice.
func (p *porter) setTo(s string) {
	copy(p.b[p.j+1:], s)
	p.k = p.j + len(s)
}

func (p *porter) r(s string) {
	if p.m() > 0 {
		p.setTo(s)
	}
}

// step1ab removes plurals and -ed or -ing.
func (p *porter) step1ab() {
	if p.b[p.k] == 's' {
		switch {
		case p.ends("sses"):
			p.k -= 2
		case p.ends("ies"):
			p.setTo("i")
		case p.b[p.k-1] != 's':
			p.k--
		}
	}
	if p.ends("eed") {
		if p.m() > 0 {
			p.k--
		}
		return
	}
	if (p.ends("ed") || p.ends("ing")) && p.vowelInStem() {
		p.k = p.j
		switch {
		case p.ends("at"):
			p.setTo("ate")
		case p.ends("bl"):
			p.setTo("ble")
		case p.ends("iz"):
			p.setTo("ize")
		case p.doubleC(p.k):
			switch p.b[p.k] {
			case 'l', 's', 'z':
			default:
				p.k--
			}
		default:
			p.j = p.k
			if p.m() == 1 && p.cvc(p.k) {
				p.setTo("e")
			}
		}
	}
}

// step1c turns a terminal y into i when there is another vowel in the stem.
func (p *porter) step1c() {
	if p.ends("y") && p.vowelInStem() {
		p.b[p.k] = 'i'
	}
}

// step2 maps double suffixes to single ones (-ization → -ize).
func (p *porter) step2() {
	if p.k < 1 {
		return
	}
	var rules []string
	switch p.b[p.k-1] {
	case 'a':
		rules = []string{"ational", "ate", "tional", "tion"}
	case 'c':
		rules = []string{"enci", "ence", "anci", "ance"}
	case 'e':
		rules = []string{"izer", "ize"}
	case 'l':
		rules = []string{"bli", "ble", "alli", "al", "entli", "ent", "eli", "e", "ousli", "ous"}
	case 'o':
		rules = []string{"ization", "ize", "ation", "ate", "ator", "ate"}
	case 's':
		rules = []string{"alism", "al", "iveness", "ive", "fulness", "ful", "ousness", "ous"}
	case 't':
		rules = []string{"aliti", "al", "iviti", "ive", "biliti", "ble"}
	case 'g':
		rules = []string{"logi", "log"}
	}
	p.apply(rules)
}

// step3 handles -ic-, -full, -ness etc.
func (p *porter) step3() {
	var rules []string
	switch p.b[p.k] {
	case 'e':
		rules = []string{"icate", "ic", "ative", "", "alize", "al"}
	case 'i':
		rules = []string{"iciti", "ic"}
	case 'l':
		rules = []string{"ical", "ic", "ful", ""}
	case 's':
		rules = []string{"ness", ""}
	}
	p.apply(rules)
}

// apply takes pairs of (suffix, replacement) and applies the first suffix
// that matches, if the stem before it has m > 0.
func (p *porter) apply(rules []string) {
	for i := 0; i+1 < len(rules); i += 2 {
		if p.ends(rules[i]) {
			p.r(rules[i+1])
			return
		}
	}
}

// step4Suffixes lists, by the next-to-last letter of the word, the suffixes
// step4 removes.
var step4Suffixes = [256][]string{
	'a': {"al"}, 'c': {"ance", "ence"}, 'e': {"er"}, 'i': {"ic"},
	'l': {"able", "ible"}, 'n': {"ant", "ement", "ment", "ent"}, 'o': {"ou"},
	's': {"ism"}, 't': {"ate", "iti"}, 'u': {"ous"}, 'v': {"ive"}, 'z': {"ize"},
}

// step4 removes -ant, -ence etc. in context <c>vcvc<v>.
func (p *porter) step4() {
	if p.k < 1 {
		return
	}
	// -ion goes only after s or t (adoption → adopt, but not onion → on).
	ion := p.ends("ion") && p.j >= 0 && (p.b[p.j] == 's' || p.b[p.j] == 't')
	if !ion && !p.endsAny(step4Suffixes[p.b[p.k-1]]) {
		return
	}
	if p.m() > 1 {
		p.k = p.j
	}
}

// endsAny reports whether the word ends with one of suffixes, setting j as
// ends does for the first that matches.
func (p *porter) endsAny(suffixes []string) bool {
	for _, s := range suffixes {
		if p.ends(s) {
			return true
		}
	}
	return false
}

// step5 removes a final -e if m > 1 and changes -ll to -l if m > 1.
func (p *porter) step5() {
	p.j = p.k
	if p.b[p.k] == 'e' {
		a := p.m()
		if a > 1 || a == 1 && !p.cvc(p.k-1) {
			p.k--
		}
	}
	if p.b[p.k] == 'l' && p.doubleC(p.k) {
		p.j = p.k
		if p.m() > 1 {
			p.k--
		}
	}
}
