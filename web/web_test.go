package web

import (
	"bytes"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

var versionedRef = regexp.MustCompile(`/assets/([A-Za-z0-9_./-]+)\?v=([^"'\s]+)`)

func TestIndexReferencesVersionedAssetsThatExist(t *testing.T) {
	index := Index()
	if bytes.Contains(index, []byte(versionPlaceholder)) {
		t.Fatalf("Index() still contains %s", versionPlaceholder)
	}
	v := Version()
	if len(v) != 16 {
		t.Fatalf("Version() = %q, want 16 hex digits", v)
	}
	refs := versionedRef.FindAllSubmatch(index, -1)
	if len(refs) == 0 {
		t.Fatal("index.html references no versioned assets")
	}
	seen := map[string]bool{}
	for _, m := range refs {
		name, ver := string(m[1]), string(m[2])
		if ver != v {
			t.Errorf("/assets/%s has version %q, want %q", name, ver, v)
		}
		if _, err := fs.Stat(Assets(), name); err != nil {
			t.Errorf("index.html references /assets/%s, which is not in Assets(): %v", name, err)
		}
		seen[name] = true
	}
	for _, want := range []string{"app.js", "style.css", "favicon.svg"} {
		if !seen[want] {
			t.Errorf("index.html does not reference /assets/%s?v=…", want)
		}
	}
	// An asset loaded without ?v= would be cached for a year and go stale.
	for _, m := range regexp.MustCompile(`(?:src|href)="(/assets/[^"]*)"`).FindAllSubmatch(index, -1) {
		if !bytes.Contains(m[1], []byte("?v="+v)) {
			t.Errorf("index.html loads %s without ?v=%s", m[1], v)
		}
	}
}

// TestModuleImportsAreInImportMap checks that every module imported by
// another module is rewritten to a versioned URL by index.html's import map;
// otherwise the browser would fetch and cache it without ?v=.
func TestModuleImportsAreInImportMap(t *testing.T) {
	index := string(Index())
	importRe := regexp.MustCompile(`(?m)^\s*import\s[^'"]*['"]\./([A-Za-z0-9_-]+\.js)['"]`)
	for f, src := range modules(t) {
		for _, m := range importRe.FindAllStringSubmatch(src, -1) {
			entry := `"/assets/` + m[1] + `": "/assets/` + m[1] + `?v=` + Version() + `"`
			if !strings.Contains(index, entry) {
				t.Errorf("%s imports ./%s, but the import map lacks %s", f, m[1], entry)
			}
		}
	}
}

// TestTranslationKeys checks that every literal t('key') used by a module
// exists in every language, and that every language has the same keys. A
// language's dictionary is the union of its modules i18n-<lang>.js and
// i18n-<lang>-<part>.js, each imported by i18n.js; a key is defined once
// per language (i18n.js merges the parts, so a second definition would
// silently win).
func TestTranslationKeys(t *testing.T) {
	mods := modules(t)
	dictRe := regexp.MustCompile(`^i18n-([a-z]+)(?:-[a-z]+)?\.js$`)
	keyRe := regexp.MustCompile(`(?m)^\s*'([^']+)':`)
	dicts := map[string]map[string]string{} // language → key → defining module
	for f, src := range mods {
		m := dictRe.FindStringSubmatch(f)
		if m == nil {
			continue
		}
		if !strings.Contains(mods["i18n.js"], "from './"+f+"';") {
			t.Errorf("i18n.js does not import %s", f)
		}
		lang := m[1]
		if dicts[lang] == nil {
			dicts[lang] = map[string]string{}
		}
		for _, k := range keyRe.FindAllStringSubmatch(src, -1) {
			if prev, ok := dicts[lang][k[1]]; ok {
				t.Errorf("key %q is defined in both %s and %s", k[1], prev, f)
			}
			dicts[lang][k[1]] = f
		}
	}
	for _, lang := range []string{"zh", "en"} {
		if len(dicts[lang]) == 0 {
			t.Fatalf("no dictionary for language %q (i18n-%s*.js)", lang, lang)
		}
	}
	for _, keys := range dicts {
		for other, otherKeys := range dicts {
			for k, f := range keys {
				if _, ok := otherKeys[k]; !ok {
					t.Errorf("key %q (%s) has no %s text", k, f, other)
				}
			}
		}
	}

	useRe := regexp.MustCompile(`\bt\(\s*'([A-Za-z0-9_.]+)'`)
	for f, src := range mods {
		for _, m := range useRe.FindAllStringSubmatch(src, -1) {
			for lang, keys := range dicts {
				if _, ok := keys[m[1]]; !ok {
					t.Errorf("%s uses t(%q), which the %s dictionary does not define", f, m[1], lang)
				}
			}
		}
	}
}

// modules reads every JavaScript module of the UI: file name → source.
func modules(t *testing.T) map[string]string {
	t.Helper()
	files, err := fs.Glob(Assets(), "*.js")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(files))
	for _, f := range files {
		b, err := fs.ReadFile(Assets(), f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(b)
	}
	return out
}

func TestHashFS(t *testing.T) {
	base := fstest.MapFS{
		"a.js":      {Data: []byte("ab")},
		"b/c.css":   {Data: []byte("c")},
		"index.htm": {Data: []byte("x")},
	}
	tests := []struct {
		name string
		fsys fstest.MapFS
		same bool
	}{
		{"identical content", fstest.MapFS{"a.js": {Data: []byte("ab")}, "b/c.css": {Data: []byte("c")}, "index.htm": {Data: []byte("x")}}, true},
		{"one byte changed", fstest.MapFS{"a.js": {Data: []byte("aB")}, "b/c.css": {Data: []byte("c")}, "index.htm": {Data: []byte("x")}}, false},
		{"file renamed", fstest.MapFS{"a2.js": {Data: []byte("ab")}, "b/c.css": {Data: []byte("c")}, "index.htm": {Data: []byte("x")}}, false},
		{"bytes moved between files", fstest.MapFS{"a.js": {Data: []byte("a")}, "b/c.css": {Data: []byte("bc")}, "index.htm": {Data: []byte("x")}}, false},
		{"file added", fstest.MapFS{"a.js": {Data: []byte("ab")}, "b/c.css": {Data: []byte("c")}, "index.htm": {Data: []byte("x")}, "d.js": {}}, false},
	}
	want, err := hashFS(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hashFS(tt.fsys)
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tt.same {
				t.Errorf("hashFS = %s, base %s; want same=%v", got, want, tt.same)
			}
		})
	}
}

func TestIndexReturnsACopy(t *testing.T) {
	a := Index()
	a[0] = 'X'
	if b := Index(); b[0] == 'X' {
		t.Fatal("Index() shares its backing array between callers")
	}
}
