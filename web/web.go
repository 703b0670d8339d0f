// Package web holds ragent's browser UI: hand-written HTML, CSS and ES modules
// embedded in the binary, so the UI works offline and needs no build step.
//
// The api package serves it: "/" answers Index (not cached, because it names
// the current asset version) and "/assets/*" answers files from Assets with a
// year-long immutable cache. Every asset URL in index.html carries ?v=Version(),
// a hash of all asset contents, so a new binary busts every cached file at once.
// The modules import each other by relative path; the import map in index.html
// rewrites those imports to versioned URLs as well.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"sort"
	"sync"
)

//go:embed static widget
var embedded embed.FS

// versionPlaceholder is the token in index.html that Index replaces.
const versionPlaceholder = "{{VERSION}}"

// Assets returns the static files (index.html, app.js, style.css, …) rooted at
// the static directory, ready to be served under /assets/.
func Assets() fs.FS {
	sub, err := fs.Sub(embedded, "static")
	if err != nil {
		// fs.Sub fails only for an invalid path, and "static" is a constant.
		panic(err)
	}
	return sub
}

// Version returns a short content hash of every asset. The embedded files
// cannot change while the process runs, so it is computed on first use only.
func Version() string { return version() }

// Index returns index.html with every {{VERSION}} placeholder replaced by
// Version(). The caller may modify the returned slice.
func Index() []byte { return bytes.Clone(index()) }

var version = sync.OnceValue(func() string {
	v, err := hashFS(Assets())
	if err != nil {
		// The embedded FS is part of the binary; failing to read it is a build defect.
		panic(err)
	}
	return v
})

var index = sync.OnceValue(func() []byte {
	b, err := fs.ReadFile(Assets(), "index.html")
	if err != nil {
		panic(err)
	}
	return bytes.ReplaceAll(b, []byte(versionPlaceholder), []byte(Version()))
})

// hashFS hashes every regular file's path and content in sorted path order, so
// the result depends only on what the files hold.
func hashFS(fsys fs.FS) (string, error) {
	var paths []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return "", err
		}
		// Length-prefix both parts so ("ab","c") and ("a","bc") hash differently.
		for _, part := range [][]byte{[]byte(p), b} {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
			h.Write(part)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Widget returns the embeddable chat widget's script (widget/widget.js,
// served at /widget.js for other sites' pages), which is not one of the UI's
// modules.
func Widget() ([]byte, bool) {
	b, err := fs.ReadFile(embedded, "widget/widget.js")
	return b, err == nil
}
