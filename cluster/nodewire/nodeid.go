package nodewire

import (
	"errors"
	"fmt"
)

// CheckNodeID checks a node ID, whether this node's own or one another
// node gives (in gossip, a join or the member info exchange): 1 to 255
// bytes of ASCII letters, digits, '-', '_' and '.', and not "." or "..",
// like Consul's node names. An ID names the node in raft's configuration,
// in logs and metrics, and in file and URL paths, where spaces, slashes
// and control characters would mislead.
func CheckNodeID(id string) error {
	switch {
	case id == "":
		return errors.New("is empty")
	case len(id) > MaxIDLen:
		return fmt.Errorf("is longer than %d bytes", MaxIDLen)
	case id == "." || id == "..":
		return errors.New(`must not be "." or ".."`)
	}
	for _, r := range id {
		ok := 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("has %q: a node ID holds only letters, digits, '-', '_' and '.'", r)
		}
	}
	return nil
}
