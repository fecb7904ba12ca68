package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outcome is what one applied command showed the outside world.
type outcome struct {
	Result Result
	Events []Event
}

func TestReplayIsDeterministic(t *testing.T) {
	const steps = 3000 // enough that every seed exercises every status and event (1500 missed a cancel in 1 seed of ~600)
	for _, seed := range randomSeeds(t, 8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cmds := newCommandLog(seed).take(steps)
			first, second := newRecorder(), newRecorder()
			var outcomes []outcome
			var snaps, snapsV5 [][]byte
			for i, c := range cmds {
				r1, e1 := first.apply(c)
				r2, e2 := second.apply(c)
				s1, s2 := first.Snapshot(), second.Snapshot()
				if !bytes.Equal(s1, s2) || r1 != r2 {
					t.Fatalf("seed %d: replicas diverged at step %d (%+v)", seed, i, c)
				}
				v1, v2 := snapshotV5(t, first.Machine), snapshotV5(t, second.Machine)
				if !bytes.Equal(v1, v2) {
					t.Fatalf("seed %d: replicas' version 5 snapshots differ at step %d (%+v)", seed, i, c)
				}
				require.Equal(t, e1, e2, "seed %d step %d: events", seed, i)
				outcomes = append(outcomes, outcome{r1, e1})
				snaps = append(snaps, s1)
				snapsV5 = append(snapsV5, v1)
			}

			// A replica restored from a snapshot mid-way, fed the rest of the
			// log, answers and ends exactly like the replica that saw it all.
			for _, mid := range []int{steps / 3, steps / 2} {
				third := newRecorder()
				require.NoError(t, third.Restore(snaps[mid]), "seed %d", seed)
				for i := mid + 1; i < steps; i++ {
					r, e := third.apply(cmds[i])
					require.Equal(t, outcomes[i], outcome{r, e}, "seed %d: restored at %d, step %d", seed, mid, i)
					if !bytes.Equal(snaps[i], third.Snapshot()) {
						t.Fatalf("seed %d: restored at %d, snapshot differs at step %d", seed, mid, i)
					}
				}
			}

			// Restored from version 5 (the releases left out), a replica
			// keeps the same state: only a repeat of a release from before
			// the snapshot is answered otherwise, not held (or no session).
			mid := steps / 2
			fromV5 := newRecorder()
			require.NoError(t, fromV5.Restore(snapsV5[mid]), "seed %d", seed)
			for i := mid + 1; i < steps; i++ {
				r, e := fromV5.apply(cmds[i])
				want := outcomes[i]
				require.Equal(t, want.Events, e, "seed %d step %d: events", seed, i)
				if r != want.Result {
					assert.Contains(t, []Op{OpRelease, OpSessionDestroy}, cmds[i].Op, "seed %d step %d", seed, i)
					assert.Equal(t, StatusReleased, want.Result.Status, "seed %d step %d", seed, i)
					assert.Contains(t, []Status{StatusNotHeld, StatusNoSession}, r.Status, "seed %d step %d", seed, i)
				}
				if !bytes.Equal(snapsV5[i], snapshotV5(t, fromV5.Machine)) {
					t.Fatalf("seed %d: restored from version 5 at %d, state differs at step %d", seed, mid, i)
				}
			}

			// The log exercised what it should.
			seen := map[Status]bool{}
			kinds := map[EventKind]bool{}
			for _, o := range outcomes {
				seen[o.Result.Status] = true
				for _, e := range o.Events {
					kinds[e.Kind] = true
				}
			}
			for _, s := range []Status{StatusGranted, StatusQueued, StatusHeld, StatusExtended, StatusReleased, StatusCanceled, StatusNotHeld, StatusTicked, StatusInvalid, StatusNoSession} {
				assert.True(t, seen[s], "seed %d: no %s in the log", seed, s)
			}
			for _, k := range []EventKind{EventGranted, EventWaitExpired, EventExpired, EventSessionExpired} {
				assert.True(t, kinds[k], "seed %d: no %s event", seed, k)
			}
			forced := map[Status]bool{}
			for i, o := range outcomes {
				if cmds[i].Op == OpForceRelease {
					forced[o.Result.Status] = true
				}
			}
			assert.True(t, forced[StatusReleased] && forced[StatusNotHeld], "seed %d: force-release of held and free keys not both in the log", seed)
		})
	}
}

func TestReplayThroughEncoding(t *testing.T) {
	// What the cluster does: batch commands into entries, decode them on
	// every replica, apply. The result must be what applying directly gives.
	for _, seed := range randomSeeds(t, 3) {
		cmds := newCommandLog(seed).take(1000)
		direct, decoded := New(nil), New(nil)
		for i := 0; i < len(cmds); i += 7 {
			batch := cmds[i:min(i+7, len(cmds))]
			var valid []Command
			for _, c := range batch {
				if c.Validate() == nil {
					valid = append(valid, c)
				}
			}
			entry, err := AppendBatch(nil, valid)
			require.NoError(t, err)
			got, err := DecodeBatch(entry)
			require.NoError(t, err, "seed %d", seed)
			require.Equal(t, len(valid), len(got))
			for j := range valid {
				assert.Equal(t, direct.Apply(valid[j]), decoded.Apply(got[j]), "seed %d", seed)
			}
		}
		assert.Equal(t, direct.Snapshot(), decoded.Snapshot(), "seed %d", seed)
	}
}
