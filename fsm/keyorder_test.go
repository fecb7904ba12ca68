package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// checkOrder verifies the key order's shape (see keyOrder): leaves at one
// depth, keys strictly ascending and within their separators, node sizes
// within bounds, and the count.
func checkOrder(o *keyOrder) error {
	if o.root == nil {
		return fmt.Errorf("key order has no root")
	}
	if !o.root.leaf() && len(o.root.children) < 2 {
		return fmt.Errorf("inner root with %d children", len(o.root.children))
	}
	c := orderCheck{leafDepth: -1}
	if err := c.node(o.root, 0, true, true, "", false, "", false); err != nil {
		return err
	}
	if c.count != o.n {
		return fmt.Errorf("key order counts %d, holds %d", o.n, c.count)
	}
	return nil
}

type orderCheck struct {
	leafDepth int
	count     int
	last      string
}

// node checks n, whose keys must be at or after lo (if hasLo) and before hi
// (if hasHi).
func (c *orderCheck) node(n *orderNode, depth int, root, rightmost bool, lo string, hasLo bool, hi string, hasHi bool) error {
	size := n.size()
	switch {
	case size > orderMax:
		return fmt.Errorf("node at depth %d holds %d", depth, size)
	case size == 0 && !root:
		return fmt.Errorf("empty node at depth %d", depth)
	case size < orderMin && !root && !rightmost:
		return fmt.Errorf("node off the right spine at depth %d holds %d", depth, size)
	}
	if n.leaf() {
		if c.leafDepth < 0 {
			c.leafDepth = depth
		}
		if depth != c.leafDepth {
			return fmt.Errorf("leaves at depths %d and %d", c.leafDepth, depth)
		}
		if n.keys != nil {
			return fmt.Errorf("leaf with separators")
		}
		for _, r := range n.entries {
			e := r.get()
			switch {
			case c.count > 0 && e.key() <= c.last:
				return fmt.Errorf("key %q after %q", e.key(), c.last)
			case hasLo && e.key() < lo:
				return fmt.Errorf("key %q before its lower bound %q", e.key(), lo)
			case hasHi && e.key() >= hi:
				return fmt.Errorf("key %q at or after its upper bound %q", e.key(), hi)
			}
			c.last = e.key()
			c.count++
		}
		return nil
	}
	if n.entries != nil {
		return fmt.Errorf("inner node with entries")
	}
	if len(n.keys) != len(n.children)-1 {
		return fmt.Errorf("inner node with %d children and %d separators", len(n.children), len(n.keys))
	}
	for i, child := range n.children {
		clo, chasLo, chi, chasHi := lo, hasLo, hi, hasHi
		if i > 0 {
			clo, chasLo = n.keys[i-1], true
		}
		if i < len(n.keys) {
			chi, chasHi = n.keys[i], true
		}
		if chasLo && chasHi && clo >= chi {
			return fmt.Errorf("separators %q, %q out of order", clo, chi)
		}
		if err := c.node(child, depth+1, false, rightmost && i == len(n.children)-1, clo, chasLo, chi, chasHi); err != nil {
			return err
		}
	}
	return nil
}

// orderModel runs a key order beside a sorted slice of the same keys.
type orderModel struct {
	t       *testing.T
	order   keyOrder
	keys    []string // sorted
	entries map[string]*entry
}

// buildKeyOrder makes the order of entries already in strictly ascending
// key order, as a restore does (buildKeyOrderOn), from a list of them.
func buildKeyOrder(sorted []*entry) keyOrder {
	var leaves []*orderNode
	for start := 0; start < len(sorted); start += orderMax {
		leaf := newOrderLeaf()
		for _, e := range sorted[start:min(start+orderMax, len(sorted))] {
			leaf.entries = append(leaf.entries, refTo(e))
		}
		leaves = append(leaves, leaf)
	}
	return buildKeyOrderOn(leaves, len(sorted))
}

func newOrderModel(t *testing.T, sorted []string) *orderModel {
	m := &orderModel{t: t, keys: slices.Clone(sorted), entries: map[string]*entry{}}
	built := make([]*entry, len(sorted))
	for i, k := range sorted {
		built[i] = newEntry(k)
		m.entries[k] = built[i]
	}
	m.order = buildKeyOrder(built)
	return m
}

func (m *orderModel) insert(k string) {
	i, found := slices.BinarySearch(m.keys, k)
	if found {
		return
	}
	e := newEntry(k)
	m.keys = slices.Insert(m.keys, i, k)
	m.entries[k] = e
	m.order.insert(e)
}

func (m *orderModel) remove(k string) {
	i, found := slices.BinarySearch(m.keys, k)
	if !found {
		// Not in the order: removing it changes nothing.
		m.order.remove(newEntry(k))
		return
	}
	m.keys = slices.Delete(m.keys, i, i+1)
	m.order.remove(m.entries[k])
	delete(m.entries, k)
}

// check compares the order with the model: shape, the whole walk, and a
// walk from from, stopped after limit keys.
func (m *orderModel) check(from string, limit int) {
	m.t.Helper()
	if err := checkOrder(&m.order); err != nil {
		m.t.Fatal(err)
	}
	var all []string
	m.order.ascend("", func(e *entry) bool {
		if m.entries[e.key()] != e {
			m.t.Fatalf("walk yields %q, not the entry inserted", e.key())
		}
		all = append(all, e.key())
		return true
	})
	if !slices.Equal(all, m.keys) {
		m.t.Fatalf("walk yields %d keys, want %d", len(all), len(m.keys))
	}
	m.seek(from, limit)
}

// seek compares a walk from from, stopped after limit keys, with the model.
func (m *orderModel) seek(from string, limit int) {
	m.t.Helper()
	if m.order.len() != len(m.keys) {
		m.t.Fatalf("len %d, want %d", m.order.len(), len(m.keys))
	}
	i, _ := slices.BinarySearch(m.keys, from)
	want := m.keys[i:min(i+limit, len(m.keys))]
	var got []string
	m.order.ascend(from, func(e *entry) bool {
		got = append(got, e.key())
		return len(got) < limit
	})
	if len(want) == 0 {
		want = nil
	}
	if !slices.Equal(got, want) {
		m.t.Fatalf("walk from %q limit %d yields %q, want %q", from, limit, got, want)
	}
}

// orderTestKey is "k" and i in six digits, so keys sort as their numbers do.
func orderTestKey(i int) string {
	b := []byte("k000000")
	for j := len(b) - 1; j > 0 && i > 0; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return string(b)
}

// orderTestKeys is the first n of orderTestKey's keys.
func orderTestKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = orderTestKey(i)
	}
	return keys
}

func TestKeyOrderAgainstSortedSlice(t *testing.T) {
	const pool = 6000 // enough for three levels
	for _, seed := range randomSeeds(t, 2) {
		r := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
		randomKey := func() string { return orderTestKey(r.IntN(pool)) }
		// Every step seeks; every so often the whole order is checked.
		checkEvery := func(m *orderModel, step, every int) {
			if step%every == 0 {
				m.check(randomKey(), 1+r.IntN(200))
			} else {
				m.seek(randomKey(), 1+r.IntN(20))
			}
		}

		t.Run(fmt.Sprintf("seed=%d/random", seed), func(t *testing.T) {
			m := newOrderModel(t, nil)
			for step := range 3 * pool {
				// Grow, then shrink to nothing: every split and every merge.
				if step < 3*pool/2 && r.IntN(10) < 7 || step >= 3*pool/2 && r.IntN(10) < 3 {
					m.insert(randomKey())
				} else {
					m.remove(randomKey())
				}
				checkEvery(m, step, 251)
			}
			for _, k := range slices.Clone(m.keys) {
				m.remove(k)
				checkEvery(m, len(m.keys), 101)
			}
			m.check("", 1)
		})

		t.Run(fmt.Sprintf("seed=%d/ascending then random removals", seed), func(t *testing.T) {
			m := newOrderModel(t, nil)
			for i := range pool {
				m.insert(orderTestKey(i))
				checkEvery(m, i, 499)
			}
			m.check("", pool)
			for step, i := range r.Perm(pool) {
				m.remove(orderTestKey(i))
				checkEvery(m, step, 257)
			}
			m.check("", 1)
		})

		t.Run(fmt.Sprintf("seed=%d/descending then ascending removals", seed), func(t *testing.T) {
			m := newOrderModel(t, nil)
			for i := pool - 1; i >= 0; i-- {
				m.insert(orderTestKey(i))
				checkEvery(m, i, 499)
			}
			for i := range pool {
				m.remove(orderTestKey(i))
				checkEvery(m, i, 257)
			}
			m.check("", 1)
		})

		t.Run(fmt.Sprintf("seed=%d/built then churned", seed), func(t *testing.T) {
			for _, n := range []int{0, 1, orderMax - 1, orderMax, orderMax + 1, orderMax * orderMax, orderMax*orderMax + 1, pool} {
				m := newOrderModel(t, orderTestKeys(n))
				m.check("", n+1)
				for step := range 2000 {
					if r.IntN(2) == 0 {
						m.insert(randomKey())
					} else {
						m.remove(randomKey())
					}
					checkEvery(m, step, 199)
				}
				m.check("", 1)
			}
		})
	}
}

// TestKeyOrderEdges drives the cases random operations rarely reach: the
// right spine's small nodes emptied or refilled from their left sibling,
// and an inner node refilled from its right sibling.
func TestKeyOrderEdges(t *testing.T) {
	t.Run("a last leaf of one key under an inner node of one child empties", func(t *testing.T) {
		n := orderMax*orderMax + 1
		m := newOrderModel(t, orderTestKeys(n))
		m.check("", 1)
		m.remove(orderTestKey(n - 1))
		m.check(orderTestKey(n-2), 10)
	})
	t.Run("a last leaf below the minimum takes keys from its left sibling", func(t *testing.T) {
		n := 3 * orderMax
		m := newOrderModel(t, nil)
		for i := range n + 3 {
			m.insert(orderTestKey(i)) // ascending: full leaves and a last one of 3
		}
		m.check("", 1)
		m.remove(orderTestKey(n + 2))
		m.check(orderTestKey(n-10), 20)
	})
	t.Run("a last inner node below the minimum takes children from its left sibling", func(t *testing.T) {
		n := 2*orderMax*orderMax + 3*orderMax
		m := newOrderModel(t, orderTestKeys(n)) // the root's last child has 3 leaves
		m.check("", 1)
		for i := n - orderMax; i < n; i++ {
			m.remove(orderTestKey(i))
		}
		m.check(orderTestKey(n-3*orderMax), 3*orderMax)
	})
	t.Run("an inner node below the minimum takes children from its right sibling", func(t *testing.T) {
		n := 3 * orderMax * orderMax
		m := newOrderModel(t, orderTestKeys(n)) // three full inner nodes of full leaves
		for i := range orderMax*orderMax - 2*orderMax {
			m.remove(orderTestKey(i))
			if i%(orderMax/2) == 0 {
				m.check(orderTestKey(i), 2*orderMax)
			}
		}
		m.check("", 1)
	})
	t.Run("removing a key not in the order changes nothing", func(t *testing.T) {
		m := newOrderModel(t, orderTestKeys(orderMax+1))
		m.remove("absent")
		m.remove(orderTestKey(3) + "x")
		m.check("", 1)
		if m.order.len() != len(m.keys) {
			t.Fatalf("len %d, want %d", m.order.len(), len(m.keys))
		}
	})
}

// Keys that arrive nearly in order, as when many clients each take the
// next numbered key and their acquires reach the leader a little out of
// order, fill the leaves: a full leaf passes an entry to a sibling with
// room rather than split into two half-full ones. Split in halves, such
// leaves averaged 49 entries of 64.
func TestNearlyOrderedInsertsFillLeaves(t *testing.T) {
	const n, late = 100_000, 256
	r := rand.New(rand.NewPCG(7, 0))
	arrival := make([]float64, n)
	for i := range arrival {
		arrival[i] = float64(i) + r.Float64()*late
	}
	keys := make([]int, n)
	for i := range keys {
		keys[i] = i
	}
	sort.Slice(keys, func(a, b int) bool { return arrival[keys[a]] < arrival[keys[b]] })
	o := newKeyOrder()
	entries := make([]*entry, 0, n) // the order holds them by entryRef: a machine's index would hold them
	for _, i := range keys {
		entries = append(entries, newEntry(lockKey(i)))
		o.insert(entries[len(entries)-1])
	}
	leaves := 0
	var walk func(*orderNode)
	walk = func(nd *orderNode) {
		if nd.leaf() {
			leaves++
			return
		}
		for _, c := range nd.children {
			walk(c)
		}
	}
	walk(o.root)
	perLeaf := float64(n) / float64(leaves)
	if perLeaf < 0.85*orderMax {
		t.Errorf("%.1f entries per leaf of %d", perLeaf, orderMax)
	}
	if err := checkOrder(&o); err != nil {
		t.Fatal(err)
	}
}
