package archtest

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The house rules' limits for code that is not a test (docs/development.md).
const (
	maxFileLines = 500
	maxFuncLines = 120
)

// oversizeAllowList names files (relative to the module root) that may
// break a limit for now, each with the reason. Shrink it; never grow it
// without one.
var oversizeAllowList = map[string]string{}

// TestFileAndFunctionSizes fails on a Go file that is not a test with more
// than 500 lines, or a function or method in one with more than 120 (from
// its func keyword to its closing brace), outside the allow list. Generated
// files are left out.
func TestFileAndFunctionSizes(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated(src) {
			return nil
		}
		files++
		if _, ok := oversizeAllowList[rel]; ok {
			return nil
		}
		for _, v := range oversize(t, rel, src) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read only %d Go files below %s; is it the module root?", files, root)
	}
}

// oversize lists what in one file breaks a limit.
func oversize(t *testing.T, name string, src []byte) []string {
	t.Helper()
	var out []string
	if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
		out = append(out, name+": "+itoa(n)+" lines (limit "+itoa(maxFileLines)+"): give a coherent part its own file")
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("parse %s: %v", name, err)
		return out
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if n := end - start + 1; n > maxFuncLines {
			out = append(out, name+":"+itoa(start)+": func "+fn.Name.Name+" has "+itoa(n)+" lines (limit "+itoa(maxFuncLines)+")")
		}
	}
	return out
}

// generated reports the "Code generated … DO NOT EDIT." line of
// generated Go files.
func generated(src []byte) bool {
	for line := range bytes.Lines(src) {
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.Contains(line, []byte("DO NOT EDIT.")) {
			return true
		}
		if bytes.HasPrefix(line, []byte("package ")) {
			return false
		}
	}
	return false
}

func itoa(n int) string { return strconv.Itoa(n) }
