// Package datadir owns a raftlock node's data directory: the lock that keeps
// a second node off it, the identity file that says whose it is, the raft
// log and stable store (raft-wal or raft-boltdb) with the checks that refuse
// a damaged log (the log mark, the WAL's checksums), the snapshot store, and
// the permissions of everything kept there. Package cluster opens it in
// cluster.New; the formats on disk are described where they are written
// (logstore.go, logmark.go, walcheck.go, identity.go).
package datadir

import (
	"fmt"
	"regexp"
)

// ConfigError is a problem with a setting the caller gave, which it can fix.
// Field names the setting as package cluster's Config spells it; Format
// words the problem for fmt with Args, naming each setting it mentions as
// {Field}, so that package cluster can report it in its own terms.
type ConfigError struct {
	Field  string
	Format string
	Args   []any
}

func configError(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Format: format, Args: args}
}

// Error names the settings as Config spells them.
func (e *ConfigError) Error() string {
	format := fieldRef.ReplaceAllStringFunc(e.Format, func(ref string) string { return ref[1 : len(ref)-1] })
	return "cluster: invalid config: " + fmt.Sprintf(format, e.Args...)
}

var fieldRef = regexp.MustCompile(`\{[A-Za-z]+\}`)
