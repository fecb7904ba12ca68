package fsm

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The index answers as a map would through random adds and removes, with
// few keys (many collisions and wrap-arounds at the end of the slots) and
// with many (growth).
func TestKeyIndexAgreesWithMap(t *testing.T) {
	for _, keys := range []int{5, 40, 3000} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(keys), 1))
			var x keyIndex
			if keys > 1000 {
				x = newKeyIndex(keys / 2)
			}
			want := make(map[string]*entry)
			for range 20 * keys {
				k := fmt.Sprint("k", rng.IntN(keys))
				if e := want[k]; e != nil {
					require.Same(t, e, x.get(k), k)
					x.remove(k)
					delete(want, k)
					require.Nil(t, x.get(k), k)
				} else {
					require.Nil(t, x.get(k), k)
					e := newEntry(k)
					x.add(e)
					want[k] = e
				}
				require.Equal(t, len(want), x.len())
				if rng.IntN(keys) == 0 {
					for k, e := range want {
						require.Same(t, e, x.get(k), k)
					}
				}
			}
			x.remove("absent")
			require.Equal(t, len(want), x.len())
		})
	}
}

// all lists the index's keys and entries, in no order: for the tests'
// checks of the whole machine.
func (x *keyIndex) all() iter.Seq2[string, *entry] {
	return func(yield func(string, *entry) bool) {
		for gi := range x.groups {
			for _, e := range x.groups[gi].slots {
				if e != nil && !yield(e.key(), e) {
					return
				}
			}
		}
	}
}

// entries lists the index's entries, in no order.
func (x *keyIndex) entries() []*entry {
	var es []*entry
	for _, e := range x.all() {
		es = append(es, e)
	}
	return es
}
