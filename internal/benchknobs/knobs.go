// Package benchknobs holds settings that only the benchmark (bench/)
// changes, to model a disk it does not run on. The packages that act on
// them read them when they open what they affect; zero values change
// nothing. They are not part of any API.
package benchknobs

import "time"

// LogSyncDelay is added to every sync of the raft log's WAL segment files
// opened afterwards: a disk whose fsync takes that much longer.
var LogSyncDelay time.Duration

// LogSynced, when not nil, is told how long each sync of a WAL segment file
// took, LogSyncDelay included. It is called from raft's goroutines.
var LogSynced func(time.Duration)
