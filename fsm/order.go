package fsm

// keyOrder holds the machine's entries in key byte order, beside the map
// that serves the commands' point lookups. Range seeks to its first key in
// O(log n) and walks on in order, and Snapshot walks it instead of sorting.
// It changes only when a key appears or goes (a grant on a free key, the
// end of a lease nobody waits for); extends and hand-offs leave it alone.
//
// It is a B+tree of entry references (entryRef): leaves hold up to orderMax entries in key
// order, inner nodes up to orderMax children and the separator keys between
// them. Written here rather than taken from a library because of what the
// machine does with it: Restore receives keys already sorted and builds full
// leaves bottom-up in O(n) without a comparison; keys created in ascending
// order (job ids, timestamps) split the rightmost leaf at the end, leaving
// full leaves behind; and comparisons are plain string compares the
// compiler sees, not calls through a function value.
//
// Shape, checked by checkOrder in the tests: all leaves at the same depth;
// keys strictly ascending across the leaves; every key under children[i] of
// an inner node sorts before keys[i], and every key under children[i+1] at
// or after it; no node above orderMax; no empty node but an empty root
// leaf; an inner root has two children or more; and a node off the right
// spine (the path of last children) holds at least orderMin, so the tree
// costs at most about 45 bytes a key whatever the order of inserts and
// removals (9 when full). Right-spine nodes may hold fewer: that is where
// ascending inserts and a bulk build leave their remainder. Separators are
// bounds, not necessarily keys still held: a removal leaves them be, so a
// separator may keep a released key's bytes alive, one per leaf at most.
type keyOrder struct {
	root *orderNode
	n    int
}

type orderNode struct {
	entries  []entryRef   // leaf: in ascending key order (the key index holds each entry for the collector)
	children []*orderNode // inner: subtrees in ascending key order
	keys     []string     // inner: keys[i] separates children[i] and children[i+1]
}

const (
	orderMax = 64           // most entries in a leaf, children in an inner node
	orderMin = orderMax / 4 // fewest in a node off the right spine
)

func newKeyOrder() keyOrder { return keyOrder{root: newOrderLeaf()} }

func newOrderLeaf() *orderNode { return &orderNode{entries: make([]entryRef, 0, orderMax)} }

// newOrderInner has room for one child beyond orderMax: an insert adds the
// child, then splits the node.
func newOrderInner() *orderNode {
	return &orderNode{children: make([]*orderNode, 0, orderMax+1), keys: make([]string, 0, orderMax)}
}

func (n *orderNode) leaf() bool { return n.children == nil }

func (n *orderNode) size() int {
	if n.leaf() {
		return len(n.entries)
	}
	return len(n.children)
}

// lowerBound is the index of the first entry of a leaf whose key is at or
// after key.
func (n *orderNode) lowerBound(key string) int {
	lo, hi := 0, len(n.entries)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if n.entries[mid].get().key() < key {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// child is the index of an inner node's child whose range holds key: the
// number of separators at or before it.
func (n *orderNode) child(key string) int {
	lo, hi := 0, len(n.keys)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if n.keys[mid] <= key {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func (o *keyOrder) len() int { return o.n }

// insert adds e, whose key is not in the order yet.
func (o *keyOrder) insert(e *entry) {
	if sep, right := o.root.insert(e, true); right != nil {
		root := newOrderInner()
		root.children = append(root.children, o.root, right)
		root.keys = append(root.keys, sep)
		o.root = root
	}
	o.n++
}

// insert adds e under n. If n splits, it returns the new right sibling and
// the separator before it. rightmost says n is on the right spine.
func (n *orderNode) insert(e *entry, rightmost bool) (string, *orderNode) {
	if n.leaf() {
		return n.insertEntry(n.lowerBound(e.key()), e, rightmost)
	}
	i := n.child(e.key())
	if n.shiftFromFullLeaf(i) {
		i = n.child(e.key()) // the boundary moved: e may belong to the sibling now
	}
	sep, right := n.children[i].insert(e, rightmost && i == len(n.children)-1)
	if right == nil {
		return "", nil
	}
	return n.insertChild(i+1, sep, right, rightmost)
}

func (n *orderNode) insertEntry(i int, e *entry, rightmost bool) (string, *orderNode) {
	if len(n.entries) < orderMax {
		n.entries = insertAt(n.entries, i, refTo(e))
		return "", nil
	}
	right := newOrderLeaf()
	if rightmost && i == len(n.entries) {
		// Past the last key of the whole order: ascending inserts. Start a
		// new leaf and leave this one full.
		right.entries = append(right.entries, refTo(e))
		return e.key(), right
	}
	mid := orderMax / 2
	right.entries = append(right.entries, n.entries[mid:]...)
	clear(n.entries[mid:])
	n.entries = n.entries[:mid]
	if i <= mid {
		n.entries = insertAt(n.entries, i, refTo(e))
	} else {
		right.entries = insertAt(right.entries, i-mid, refTo(e))
	}
	return right.entries[0].get().key(), right
}

// shiftFromFullLeaf makes room in children[i], a full leaf, by moving its
// first entry to its left sibling or its last to its right sibling, when
// that sibling has room for it and for the entry being inserted; it
// reports whether it did. Splitting a full leaf leaves two half-full
// ones; with keys that arrive nearly in order (many clients taking
// numbered keys, each a little late), the left half was rarely filled
// again and leaves averaged about three quarters full. Passing entries to
// a sibling first fills them further: the order's arrays of entry
// references are the third largest part of a held lock's memory.
func (n *orderNode) shiftFromFullLeaf(i int) bool {
	c := n.children[i]
	if !c.leaf() || len(c.entries) < orderMax {
		return false
	}
	if i > 0 {
		if left := n.children[i-1]; len(left.entries) <= orderMax-2 {
			left.entries = append(left.entries, c.entries[0])
			c.entries = removeAt(c.entries, 0)
			n.keys[i-1] = c.entries[0].get().key()
			return true
		}
	}
	if i+1 < len(n.children) {
		if right := n.children[i+1]; len(right.entries) <= orderMax-2 {
			last := c.entries[len(c.entries)-1]
			right.entries = insertAt(right.entries, 0, last)
			c.entries[len(c.entries)-1] = 0
			c.entries = c.entries[:len(c.entries)-1]
			n.keys[i] = last.get().key()
			return true
		}
	}
	return false
}

// insertChild puts child at children[i], after separator sep, and splits n
// if that makes it too large.
func (n *orderNode) insertChild(i int, sep string, child *orderNode, rightmost bool) (string, *orderNode) {
	n.children = insertAt(n.children, i, child)
	n.keys = insertAt(n.keys, i-1, sep)
	if len(n.children) <= orderMax {
		return "", nil
	}
	right := newOrderInner()
	if rightmost && i == orderMax {
		// The new child is the last of the whole tree: move it alone into a
		// new node and leave this one full, as leaves do.
		right.children = append(right.children, child)
		n.children[orderMax] = nil
		n.keys[orderMax-1] = ""
		n.children = n.children[:orderMax]
		n.keys = n.keys[:orderMax-1]
		return sep, right
	}
	mid := len(n.children) / 2
	up := n.keys[mid-1]
	right.children = append(right.children, n.children[mid:]...)
	right.keys = append(right.keys, n.keys[mid:]...)
	clear(n.children[mid:])
	clear(n.keys[mid-1:])
	n.children = n.children[:mid]
	n.keys = n.keys[:mid-1]
	return up, right
}

// remove takes e out of the order.
func (o *keyOrder) remove(e *entry) {
	if !o.root.remove(e) {
		return
	}
	o.n--
	// An inner root keeps two children or more: a child emptied under a
	// root of two leaves one, which becomes the root.
	for !o.root.leaf() && len(o.root.children) == 1 {
		o.root = o.root.children[0]
	}
}

// remove takes e out from under n and repairs any child it leaves too
// small: an empty child goes, a child below orderMin merges with a sibling
// or takes some of its items. It reports whether e was there.
func (n *orderNode) remove(e *entry) bool {
	if n.leaf() {
		i := n.lowerBound(e.key())
		if i == len(n.entries) || n.entries[i] != refTo(e) {
			return false
		}
		n.entries = removeAt(n.entries, i)
		return true
	}
	i := n.child(e.key())
	c := n.children[i]
	if !c.remove(e) {
		return false
	}
	switch {
	case c.size() == 0:
		n.removeChild(i)
	case c.size() < orderMin && len(n.children) > 1:
		if i == len(n.children)-1 {
			i-- // the last child pairs with its left sibling
		}
		n.rebalance(i)
	}
	return true
}

// removeChild drops children[i] with the separator before it (after it,
// for the first child).
func (n *orderNode) removeChild(i int) {
	n.children = removeAt(n.children, i)
	if len(n.keys) > 0 {
		n.keys = removeAt(n.keys, max(i-1, 0))
	}
}

// rebalance evens out children[i] and children[i+1], one of which is below
// orderMin: merged into one when they fit, else shared half and half.
func (n *orderNode) rebalance(i int) {
	left, right := n.children[i], n.children[i+1]
	total := left.size() + right.size()
	if left.leaf() {
		if total <= orderMax {
			left.entries = append(left.entries, right.entries...)
			n.removeChild(i + 1)
			return
		}
		switch move := total/2 - len(left.entries); {
		case move > 0:
			left.entries = append(left.entries, right.entries[:move]...)
			right.entries = removeRange(right.entries, 0, move)
		case move < 0:
			keep := len(left.entries) + move
			right.entries = insertRange(right.entries, 0, left.entries[keep:])
			left.entries = removeRange(left.entries, keep, len(left.entries))
		}
		n.keys[i] = right.entries[0].get().key()
		return
	}
	// Inner nodes: the parent's separator comes down between the two
	// nodes' keys, and the one at the new boundary goes up.
	if total <= orderMax {
		left.children = append(left.children, right.children...)
		left.keys = append(append(left.keys, n.keys[i]), right.keys...)
		n.removeChild(i + 1)
		return
	}
	switch move := total/2 - len(left.children); {
	case move > 0:
		left.children = append(left.children, right.children[:move]...)
		left.keys = append(append(left.keys, n.keys[i]), right.keys[:move-1]...)
		n.keys[i] = right.keys[move-1]
		right.children = removeRange(right.children, 0, move)
		right.keys = removeRange(right.keys, 0, move)
	case move < 0:
		keep := len(left.children) + move
		down := append(left.keys[keep:len(left.keys):len(left.keys)], n.keys[i])
		right.children = insertRange(right.children, 0, left.children[keep:])
		right.keys = insertRange(right.keys, 0, down)
		n.keys[i] = left.keys[keep-1]
		left.children = removeRange(left.children, keep, len(left.children))
		left.keys = removeRange(left.keys, keep-1, len(left.keys))
	}
}

// find is key's entry, or nil.
func (o *keyOrder) find(key string) *entry {
	var found *entry
	o.ascend(key, func(e *entry) bool {
		if e.key() == key {
			found = e
		}
		return false
	})
	return found
}

// ascend calls fn for each entry whose key is at or after from, in key
// order, until fn returns false. "" walks from the first key.
func (o *keyOrder) ascend(from string, fn func(e *entry) bool) {
	o.root.ascend(from, fn)
}

func (n *orderNode) ascend(from string, fn func(e *entry) bool) bool {
	if n.leaf() {
		for _, e := range n.entries[n.lowerBound(from):] {
			if !fn(e.get()) {
				return false
			}
		}
		return true
	}
	for i := n.child(from); i < len(n.children); i++ {
		if !n.children[i].ascend(from, fn) {
			return false
		}
		from = "" // the next subtrees are walked from their start
	}
	return true
}

// buildKeyOrderOn makes the order of n entries already in leaves: full
// leaves in strictly ascending key order, the last taking the remainder
// (a restore fills them as it reads, without a list of all the entries).
// It builds bottom-up with full nodes, O(n) and without a comparison; the
// last node of each level, on the right spine, takes the remainder.
func buildKeyOrderOn(leaves []*orderNode, n int) keyOrder {
	if len(leaves) == 0 {
		return newKeyOrder()
	}
	level := leaves
	mins := make([]string, len(leaves)) // the smallest key under each node of level
	for i, leaf := range leaves {
		mins[i] = leaf.entries[0].get().key()
	}
	for len(level) > 1 {
		var up []*orderNode
		var upMins []string
		for start := 0; start < len(level); start += orderMax {
			end := min(start+orderMax, len(level))
			inner := newOrderInner()
			inner.children = append(inner.children, level[start:end]...)
			inner.keys = append(inner.keys, mins[start+1:end]...)
			up = append(up, inner)
			upMins = append(upMins, mins[start])
		}
		level, mins = up, upMins
	}
	return keyOrder{root: level[0], n: n}
}

func insertAt[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func insertRange[T any](s []T, i int, vs []T) []T {
	s = append(s, vs...) // grows s by len(vs); the tail is then moved up
	copy(s[i+len(vs):], s[i:len(s)-len(vs)])
	copy(s[i:], vs)
	return s
}

func removeAt[T any](s []T, i int) []T {
	return removeRange(s, i, i+1)
}

func removeRange[T any](s []T, i, j int) []T {
	n := copy(s[i:], s[j:])
	clear(s[i+n:])
	return s[:i+n]
}
