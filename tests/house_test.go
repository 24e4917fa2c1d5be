package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// parseDir parses the non-test Go files of one of the module's package
// directories (relative to the tests directory), with comments.
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	var out []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, af)
	}
	return fset, out
}

// TestMetricsInPackageDocs: every Prometheus metric a package of
// internal/ registers is named in that package's doc comment (in full, or
// without tributary_, or without tributary_<binary>_), so that an
// operator reading `go doc` finds all of them.
func TestMetricsInPackageDocs(t *testing.T) {
	dirs, err := filepath.Glob("../internal/*")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, dir := range dirs {
		_, files := parseDir(t, dir)
		var doc strings.Builder
		var names []string
		for _, f := range files {
			if f.Doc != nil {
				doc.WriteString(f.Doc.Text())
			}
			ast.Inspect(f, func(n ast.Node) bool {
				kv, ok := n.(*ast.KeyValueExpr)
				if !ok {
					return true
				}
				key, ok1 := kv.Key.(*ast.Ident)
				lit, ok2 := kv.Value.(*ast.BasicLit)
				if ok1 && ok2 && key.Name == "Name" && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(v, "tributary_") {
						names = append(names, v)
					}
				}
				return true
			})
		}
		words := map[string]bool{}
		for _, w := range regexp.MustCompile(`[a-z0-9_]+`).FindAllString(doc.String(), -1) {
			words[w] = true
		}
		for _, name := range names {
			seen++
			parts := strings.Split(name, "_")
			if !words[name] && !words[strings.Join(parts[1:], "_")] && !words[strings.Join(parts[2:], "_")] {
				t.Errorf("%s registers %s, which its package doc does not name", dir, name)
			}
		}
	}
	if seen < 50 {
		t.Fatalf("found only %d metrics under internal/: the check no longer sees how they are declared", seen)
	}
}

// TestNoLongFunctions: no function of the loader, the reader or the API
// (tests aside) is over 80 lines, so that each can be read at once.
func TestNoLongFunctions(t *testing.T) {
	const limit = 80
	for _, dir := range []string{"../internal/loader", "../internal/reader", "../internal/api"} {
		fset, files := parseDir(t, dir)
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
				if n := end.Line - start.Line + 1; n > limit {
					t.Errorf("%s:%d: %s is %d lines, over %d: split it into steps", start.Filename, start.Line, fd.Name.Name, n, limit)
				}
			}
		}
	}
}

// TestDocLinks: every relative link of the repository's Markdown files
// (outside code blocks) names a file or directory that exists.
func TestDocLinks(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	fence := regexp.MustCompile("(?s)```.*?```")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	files := strings.Fields(string(out))
	if len(files) < 10 {
		t.Fatalf("only %d Markdown files listed", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, ":") {
				continue // an anchor of the same page, or a URL
			}
			if _, err := os.Stat(filepath.Join("..", filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", f, m[1])
			}
		}
	}
}
