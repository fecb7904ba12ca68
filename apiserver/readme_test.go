package apiserver

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeRouteTableHeader starts the README's table of routes and rights.
const readmeRouteTableHeader = "| Route | Token | Needs |"

// readmeRouteRow is a README table row for rd, as TestREADMERouteTable wants it.
func readmeRouteRow(rd routeDoc) string {
	token := "yes"
	if rd.open {
		token = "no"
	}
	return "| `" + rd.method + " " + rd.path + "` | " + token + " | " + rd.right + " |"
}

// The README's table of routes and rights lists every route the handler
// serves (openAPIRoutes, which TestOpenAPICoversRoutes checks against the
// route table), once, with whether it needs a token and the right it
// needs, as openAPIRoutes says: so that neither can drift. When it fails,
// paste the rows it prints.
func TestREADMERouteTable(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(raw), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == readmeRouteTableHeader {
			start = i
		}
	}
	require.GreaterOrEqual(t, start, 0, "the README has no table starting %q", readmeRouteTableHeader)
	var rows []string
	for _, l := range lines[start+2:] { // past the header and its |---| line
		if !strings.HasPrefix(l, "|") {
			break
		}
		rows = append(rows, strings.TrimSpace(l))
	}
	var want []string
	for _, rd := range openAPIRoutes {
		want = append(want, readmeRouteRow(rd))
		assert.NotEmpty(t, rd.right, "%s %s: say in its routeDoc which right it needs", rd.method, rd.path)
		served := openPaths[rd.path] || isConsolePath(rd.path)
		assert.Equal(t, served, rd.open, "%s %s: its routeDoc's open must say whether ServeHTTP serves it without a token", rd.method, rd.path)
	}
	assert.Equal(t, want, rows, "the README's route table, in openAPIRoutes' order:\n%s", strings.Join(want, "\n"))
}
