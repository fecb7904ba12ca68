package fsm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRangeFrom(t *testing.T) {
	m := New(nil)
	for i, k := range []string{"jobs", "jobs/a", "jobs/b", "jobs/c", "jobs0", "other"} {
		m.Apply(acquire(0, k, numberedOwner(i), time.Duration(10*(i+1))*ms, 0))
	}
	collect := func(prefix, after string, at time.Duration) []string {
		var keys []string
		m.RangeFrom(prefix, after, at, func(key string, st KeyState) bool {
			assert.True(t, st.Held, key)
			keys = append(keys, key)
			return true
		})
		return keys
	}
	tests := []struct {
		name, prefix, after string
		at                  time.Duration
		want                []string
	}{
		{"no after starts at the prefix", "jobs/", "", 0, []string{"jobs/a", "jobs/b", "jobs/c"}},
		{"after a held key skips it", "jobs/", "jobs/a", 0, []string{"jobs/b", "jobs/c"}},
		{"after a key not held", "jobs/", "jobs/aa", 0, []string{"jobs/b", "jobs/c"}},
		{"after sorting before the prefix", "jobs/", "a", 0, []string{"jobs/a", "jobs/b", "jobs/c"}},
		{"after the prefix itself", "jobs/", "jobs/", 0, []string{"jobs/a", "jobs/b", "jobs/c"}},
		{"after the last key with the prefix", "jobs/", "jobs/c", 0, nil},
		{"after sorting past every key with the prefix", "jobs/", "k", 0, nil},
		{"after the prefix as a key", "jobs", "jobs", 0, []string{"jobs/a", "jobs/b", "jobs/c", "jobs0"}},
		{"empty prefix", "", "jobs/c", 0, []string{"jobs0", "other"}},
		{"leases ended by the read time are skipped", "jobs", "jobs", 30 * ms, []string{"jobs/c", "jobs0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, collect(tt.prefix, tt.after, tt.at))
		})
	}
}

// rangeOracle lists, through Lookup over every key the test ever used, the
// keys Range and RangeFrom must report: held at the read time, with the
// prefix, after after, in byte order.
func rangeOracle(m *Machine, universe []string, prefix, after string, at time.Duration) []string {
	var want []string
	for _, k := range universe { // sorted
		if k > after && strings.HasPrefix(k, prefix) && m.Lookup(k, at).Held {
			want = append(want, k)
		}
	}
	return want
}

// rangeKeys is what RangeFrom reports, stopping after limit keys (0: all),
// checking that each reported state is Lookup's.
func rangeKeys(t *testing.T, m *Machine, prefix, after string, at time.Duration, limit int) []string {
	t.Helper()
	var got []string
	m.RangeFrom(prefix, after, at, func(key string, st KeyState) bool {
		if want := m.Lookup(key, at); !reflect.DeepEqual(st, want) {
			t.Errorf("RangeFrom(%q, %q, %v) reports %q as %+v, Lookup as %+v", prefix, after, at, key, st, want)
		}
		got = append(got, key)
		return limit == 0 || len(got) < limit
	})
	return got
}

func TestRangeReportsExactlyTheSortedHeldKeys(t *testing.T) {
	const steps = 1500
	for _, seed := range randomSeeds(t, 4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
			// Short keys over a few bytes, the edges of byte order among
			// them, so that prefixes and afters land on, between, before and
			// after keys, and keys are prefixes of one another.
			alphabet := []string{"\x00", "/", "a", "b", "\xff"}
			word := func(maxLen int) string {
				var sb strings.Builder
				for range 1 + r.IntN(maxLen) {
					sb.WriteString(alphabet[r.IntN(len(alphabet))])
				}
				return sb.String()
			}
			seen := map[string]bool{}
			for len(seen) < 120 {
				seen[word(4)] = true
			}
			universe := make([]string, 0, len(seen))
			for k := range seen {
				universe = append(universe, k)
			}
			slices.Sort(universe)
			owners := []Owner{ownerA, ownerB, ownerC, ownerD}

			m := New(nil)
			var clock time.Duration
			for step := range steps {
				clock += time.Duration(r.IntN(1500)) * time.Microsecond
				key := universe[r.IntN(len(universe))]
				o := owners[r.IntN(len(owners))]
				ttl := time.Duration(1+r.IntN(40)) * ms
				switch n := r.IntN(10); {
				case n < 6:
					m.Apply(acquire(clock, key, o, ttl, time.Duration(r.IntN(2))*ttl))
				case n < 8:
					m.Apply(release(clock, key, o))
				case n < 9:
					m.Apply(extend(clock, key, o, ttl))
				default:
					m.Apply(tick(clock))
				}

				for range 4 {
					var prefix, after string
					switch r.IntN(4) {
					case 0: // every key
					case 1:
						k := universe[r.IntN(len(universe))]
						prefix = k[:r.IntN(len(k)+1)]
					default:
						prefix = word(2)
					}
					switch r.IntN(4) {
					case 0: // from the start
					case 1:
						after = universe[r.IntN(len(universe))]
					case 2:
						after = prefix + word(2)
					default:
						after = word(3)
					}
					at := time.Duration(0)
					if r.IntN(3) == 0 {
						at = clock + time.Duration(r.IntN(20))*ms
					}
					want := rangeOracle(m, universe, prefix, after, at)
					limit := r.IntN(len(want) + 2)
					if limit > 0 && limit < len(want) {
						want = want[:limit]
					}
					got := rangeKeys(t, m, prefix, after, at, limit)
					if !slices.Equal(got, want) {
						t.Fatalf("seed %d step %d: RangeFrom(%q, %q, %v) limit %d = %q, want %q", seed, step, prefix, after, at, limit, got, want)
					}
					if after == "" {
						var viaRange []string
						m.Range(prefix, at, func(key string, _ KeyState) bool {
							viaRange = append(viaRange, key)
							return limit == 0 || len(viaRange) < limit
						})
						if !slices.Equal(viaRange, want) {
							t.Fatalf("seed %d step %d: Range(%q, %v) limit %d = %q, want %q", seed, step, prefix, at, limit, viaRange, want)
						}
					}
				}

				// A machine restored from a snapshot lists the same keys.
				if step%250 == 0 {
					restored := New(nil)
					require.NoError(t, restored.Restore(m.Snapshot()))
					require.NoError(t, checkInternals(restored))
					assert.Equal(t, rangeKeys(t, m, "", "", 0, 0), rangeKeys(t, restored, "", "", 0, 0), "seed %d step %d", seed, step)
				}
			}
			require.NoError(t, checkInternals(m))
		})
	}
}
