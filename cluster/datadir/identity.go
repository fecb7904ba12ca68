package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// IdentityFileName is the file in DataDir that says whose the directory is:
// the node's ID and its cluster's ID.
const IdentityFileName = "identity.json"

// ErrWrongNode: the data dir belongs to another node (its identity file
// names another node ID).
var ErrWrongNode = errors.New("cluster: data dir belongs to another node")

// wrongNodeError is the refusal of a data dir that belongs to another
// node, worded for people; it matches ErrWrongNode without repeating its
// text.
type wrongNodeError struct{ msg string }

func (e *wrongNodeError) Error() string { return e.msg }

func (e *wrongNodeError) Is(target error) bool { return target == ErrWrongNode }

// Identity is the content of the identity file. ClusterID is empty while
// the node does not know it: a data dir made before identity files existed,
// or a node that has not finished joining.
type Identity struct {
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id,omitempty"`
}

// IdentityFile is the identity of an open data dir, and the file that
// records it. Safe for concurrent use.
type IdentityFile struct {
	dir string
	mu  sync.Mutex // protects id and the file
	id  Identity
}

// OpenIdentity reads dir's identity file and checks it against nodeID. A
// file that names another node is refused with ErrWrongNode: the directory
// holds that node's log and vote, and starting it under another name would
// let the cluster count one disk as two members (or the new name as the old
// one). found is false when there is no file yet.
func OpenIdentity(dir, nodeID string) (d *IdentityFile, found bool, err error) {
	d = &IdentityFile{dir: dir}
	path := d.Path()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		d.id = Identity{NodeID: nodeID}
		return d, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("cluster: reading the data dir's identity file: %w", err)
	}
	if err := json.Unmarshal(b, &d.id); err != nil || d.id.NodeID == "" {
		if err == nil {
			err = errors.New("no node_id")
		}
		return nil, false, fmt.Errorf("cluster: identity file %s is damaged (%v): it records which node and cluster data dir %s belongs to; "+
			"restore it from a backup, or, if you are sure the directory is node %q's, remove the file and start the node again",
			path, err, dir, nodeID)
	}
	if d.id.NodeID != nodeID {
		return nil, true, &wrongNodeError{
			msg: fmt.Sprintf("cluster: data dir %s belongs to node %q (%s says so), not %q: start it with NodeID %q (the agent's -node-id %s), "+
				"or give node %q an empty DataDir (-data-dir) of its own",
				dir, d.id.NodeID, path, nodeID, d.id.NodeID, d.id.NodeID, nodeID),
		}
	}
	return d, true, nil
}

func (d *IdentityFile) Path() string { return filepath.Join(d.dir, IdentityFileName) }

// clusterID is the cluster this data dir belongs to; empty if not known.
func (d *IdentityFile) ClusterID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.id.ClusterID
}

// save writes the identity file with clusterID (which may be empty).
func (d *IdentityFile) Save(clusterID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.id
	id.ClusterID = clusterID
	if err := WriteIdentity(d.dir, id); err != nil {
		return err
	}
	d.id = id
	return nil
}

// learnClusterID records clusterID if this data dir did not know its
// cluster yet; it never replaces a known one.
func (d *IdentityFile) LearnClusterID(clusterID string) (learned bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.id.ClusterID != "" || clusterID == "" {
		return false, nil
	}
	id := d.id
	id.ClusterID = clusterID
	if err := WriteIdentity(d.dir, id); err != nil {
		return false, err
	}
	d.id = id
	return true, nil
}

// Remove deletes the identity file: cluster.New made it for a fresh data dir and
// then failed, so the directory belongs to nobody yet.
func (d *IdentityFile) Remove() {
	d.mu.Lock()
	defer d.mu.Unlock()
	os.Remove(d.Path())
}

// WriteIdentity replaces dir's identity file atomically: a temporary file
// (created 0600), fsynced, renamed over the old one, and the directory
// fsynced, so a crash leaves the old file or the new one, never a torn one.
func WriteIdentity(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("cluster: identity: %w", err)
	}
	b = append(b, '\n')
	tmp, err := os.CreateTemp(dir, IdentityFileName+".tmp*")
	if err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(PrivateFileMode); err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, IdentityFileName)); err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("cluster: writing identity file: %w", err)
	}
	return nil
}
