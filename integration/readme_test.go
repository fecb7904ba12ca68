package integration

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeSkipMarker, on the line just before a README Go block, keeps
// TestREADMEGoBlocksTypeCheck from checking it, for the reason after it.
const readmeSkipMarker = "<!-- readme-check: skip"

// readmeImports are the packages a README Go block may name, by the name
// it uses for each. Every block is checked with all of them imported.
var readmeImports = map[string]string{
	"context":   "context",
	"errors":    "errors",
	"fmt":       "fmt",
	"http":      "net/http",
	"log":       "log",
	"os":        "os",
	"time":      "time",
	"api":       "github.com/raftlock/raftlock/api",
	"cluster":   "github.com/raftlock/raftlock/cluster",
	"lock":      "github.com/raftlock/raftlock/lock",
	"election":  "github.com/raftlock/raftlock/lock/election",
	"lockhttp":  "github.com/raftlock/raftlock/lock/lockhttp",
	"memstore":  "github.com/raftlock/raftlock/lock/memstore",
	"once":      "github.com/raftlock/raftlock/lock/once",
	"apiserver": "github.com/raftlock/raftlock/apiserver",
}

// readmePlaceholders declares what the README's snippets leave to the
// reader's program (the work a lock protects, the handler it wraps, the
// store it was given), so that a snippet is checked as the reader would
// paste it.
const readmePlaceholders = `package readme

import (
	"context"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

var (
	ctx   context.Context
	store lock.Store
	node  *cluster.Node
	c     *lock.Client
	mux   *http.ServeMux
	podIP string

	invoice any
	db      interface{ Exec(query string, args ...any) (any, error) }

	charge                          func(ctx context.Context, invoice any) error
	build, work, render, readConfig func(ctx context.Context) error
	writeConfig                     func(ctx context.Context) error
	move                            func(ctx context.Context, token uint64) error
	buildReport                     func(ctx context.Context, tick time.Time, token uint64) error
	runScheduler                    func(ctx context.Context, term uint64)
	recompute                       http.Handler
)
`

// readmeGoBlock is one fenced Go block of README.md: its text and the
// README line its first line of code is on.
type readmeGoBlock struct {
	code string
	line int
	skip bool
}

func readmeGoBlocks(t *testing.T) []readmeGoBlock {
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(raw), "\n")
	var blocks []readmeGoBlock
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := readmeGoBlock{line: i + 2, skip: i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), readmeSkipMarker)}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		b.code = strings.Join(code, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

// elided is a block's "the rest is yours" body, { … } or { ... }.
var elided = regexp.MustCompile(`\{\s*(…|\.\.\.)\s*\}`)

// Every Go snippet of README.md type-checks against the packages as they
// are, as the body of a function of the reader's program: a renamed
// option, a field that moved, a method that now returns two values fails
// here instead of in the first program that follows the README. What a
// snippet leaves to the reader (its ctx, its store, the work it protects)
// is declared in readmePlaceholders; an unused variable or import is not
// an error (a snippet shows a call, not the rest of its program, and every
// block imports every package a block may name).
func TestREADMEGoBlocksTypeCheck(t *testing.T) {
	blocks := readmeGoBlocks(t)
	require.NotEmpty(t, blocks, "README.md has no ```go block")

	exports := readmeExportData(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("%s: not among the packages a README block may use (readmeImports)", path)
		}
		return os.Open(file)
	})
	placeholders, err := parser.ParseFile(fset, "placeholders.go", readmePlaceholders, 0)
	require.NoError(t, err)

	checked := 0
	for _, b := range blocks {
		if b.skip {
			continue
		}
		checked++
		src, bodyLine := readmeBlockSource(b.code)
		where := func(line int) string { return fmt.Sprintf("README.md:%d", b.line+line-bodyLine) }
		file, err := parser.ParseFile(fset, "block.go", src, 0)
		if err != nil {
			var list scanner.ErrorList
			require.ErrorAs(t, err, &list)
			for _, e := range list {
				t.Errorf("%s: does not parse as Go: %s", where(e.Pos.Line), e.Msg)
			}
			continue
		}
		conf := types.Config{Importer: imp, Error: func(err error) {
			te := err.(types.Error)
			if te.Soft && (strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
				return
			}
			t.Errorf("%s: %s", where(fset.Position(te.Pos).Line), te.Msg)
		}}
		_, _ = conf.Check("readme", fset, []*ast.File{placeholders, file}, nil)
	}
	assert.Greater(t, checked, 5, "most of the README's Go blocks should be checked")
}

// readmeBlockSource wraps a README block in a function of a file that
// imports every package of readmeImports, and says on which line of that
// file the block starts.
func readmeBlockSource(code string) (src string, bodyLine int) {
	code = elided.ReplaceAllString(code, "{}")
	var b bytes.Buffer
	b.WriteString("package readme\n\nimport (\n")
	for _, name := range slices.Sorted(maps.Keys(readmeImports)) {
		fmt.Fprintf(&b, "\t%s %q\n", name, readmeImports[name])
	}
	b.WriteString(")\n\nfunc readerProgram() error {\n")
	bodyLine = strings.Count(b.String(), "\n") + 1
	b.WriteString(code)
	b.WriteString("\n\treturn nil\n}\n")
	return b.String(), bodyLine
}

// readmeExportData compiles the packages README blocks may use (the build
// cache has them when the tests were built alike: with -race or without)
// and returns each package's export data file, by import path.
func readmeExportData(t *testing.T) map[string]string {
	args := []string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}"}
	if raceEnabled {
		args = append(args, "-race")
	}
	for _, path := range readmeImports {
		args = append(args, path)
	}
	var stderr bytes.Buffer
	list := exec.Command("go", args...)
	list.Stderr = &stderr
	out, err := list.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	exports := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(l, "="); ok {
			exports[path] = file
		}
	}
	return exports
}
