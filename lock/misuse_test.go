package lock_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snippetChecker type-checks files of package main that may import this
// module's packages, as if they were in this directory. Its importer caches
// the packages it type-checks from source, so one checker serves many snippets.
type snippetChecker struct {
	fset *token.FileSet
	imp  types.Importer
}

func newSnippetChecker() *snippetChecker {
	fset := token.NewFileSet()
	return &snippetChecker{fset: fset, imp: importer.ForCompiler(fset, "source", nil)}
}

// typeCheck returns the type errors of src.
func (sc *snippetChecker) typeCheck(t *testing.T, src string) []string {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	fset := sc.fset
	file, err := parser.ParseFile(fset, filepath.Join(dir, "snippet.go"), src, 0)
	require.NoError(t, err, "the snippet must parse")
	var errs []string
	conf := types.Config{
		Importer: sc.imp,
		Error:    func(err error) { errs = append(errs, err.Error()) },
	}
	_, _ = conf.Check("snippet", fset, []*ast.File{file}, nil)
	return errs
}

// An option given to a call that does not read it is a compile error, not a
// silently ignored argument. The snippets that must compile guard against a
// test that passes because nothing compiles.
func TestOptionsOnlyCompileWhereTheyAreRead(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	const header = `package main

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

var _ = time.Second

func main() {
	ctx := context.Background()
	c := lock.New(memstore.New())
	l := c.Lock("k")
	fn := func(context.Context) error { return nil }
	_, _, _ = ctx, l, fn
`
	sc := newSnippetChecker()
	ok := []string{
		`c.Lock("k", lock.TTL(time.Minute), lock.Wait(time.Second))`,
		`_ = l.Acquire(ctx, lock.Wait(0))`,
		`_, _ = l.Run(ctx, fn, lock.Wait(time.Second))`,
		`_, _ = l.Run(ctx, fn, lock.Wait(time.Second), lock.MaxHold(time.Minute))`,
		`c.Lock("k", lock.Metadata("host=a"))`,
		`_, _ = c.NewSession(ctx, lock.SessionTTL(time.Minute), lock.LockDelay(time.Second))`,
		`_ = l.Extend(ctx, lock.TTL(time.Hour))`,
		`_, _ = c.Inspect(ctx, "k", lock.Stale())`,
	}
	for _, stmt := range ok {
		assert.Empty(t, sc.typeCheck(t, header+stmt+"\n}\n"), "%s must compile", stmt)
	}

	misplaced := map[string]string{
		`_ = l.Acquire(ctx, lock.TTL(time.Minute))`:         "lock.TTLOption does not implement lock.AcquireOption",
		`_, _ = l.Run(ctx, fn, lock.TTL(time.Minute))`:      "lock.TTLOption does not implement lock.RunOption",
		`_ = l.Acquire(ctx, lock.MaxHold(time.Minute))`:     "lock.MaxHoldOption does not implement lock.AcquireOption",
		`c.Lock("k", lock.MaxHold(time.Minute))`:            "lock.MaxHoldOption does not implement lock.LockOption",
		`_ = l.Acquire(ctx, lock.Metadata("x"))`:            "lock.MetadataOption does not implement lock.AcquireOption",
		`_, _ = c.NewSession(ctx, lock.TTL(time.Minute))`:   "lock.TTLOption does not implement lock.SessionOption",
		`_ = l.Extend(ctx, lock.Wait(time.Minute))`:         "lock.WaitOption does not implement lock.ExtendOption",
		`_ = c.Lock("k").Acquire(ctx, lock.TTL(time.Hour))`: "lock.TTLOption does not implement lock.AcquireOption",
		`_ = l.Acquire(ctx, lock.Stale())`:                  "lock.StaleOption does not implement lock.AcquireOption",
		`_, _ = c.Inspect(ctx, "k", lock.Wait(0))`:          "lock.WaitOption does not implement lock.ReadOption",
	}
	for stmt, want := range misplaced {
		errs := sc.typeCheck(t, header+stmt+"\n}\n")
		if assert.Len(t, errs, 1, "%s must not compile", stmt) {
			assert.True(t, strings.Contains(errs[0], want), "%s: got %q, want it to say %q", stmt, errs[0], want)
		}
	}
}
