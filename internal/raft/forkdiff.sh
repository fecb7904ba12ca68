#!/bin/sh
# forkdiff.sh writes fork.patch: every change this package makes to the
# files it copied from hashicorp/raft, at the version go.mod requires (read
# from the module cache). With -check it fails instead when fork.patch is
# out of date. Run it from anywhere inside the module.
set -eu
cd "$(dirname "$0")"
dir=$(go list -m -f '{{.Dir}}' github.com/hashicorp/raft)
ver=$(go list -m -f '{{.Version}}' github.com/hashicorp/raft)
# fork file:upstream file. testing.go and testing_batch.go are upstream's
# test helpers; here they are _test files, out of the production build.
files="api.go commitment.go config.go configuration.go fsm.go future.go log.go log_cache.go
observer.go progress.go raft.go replication.go saturation.go snapshot.go
state.go util.go bench_test.go commitment_test.go configuration_test.go
future_test.go integ_test.go log_cache_test.go log_test.go raft_test.go
saturation_test.go util_test.go testing_test.go:testing.go
testing_batch_test.go:testing_batch.go"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# Changes to github.com/hashicorp/raft $ver made by internal/raft (written by forkdiff.sh; testing.go is testing_test.go, testing_batch.go testing_batch_test.go)." >"$out"
for pair in $files; do
	ours=${pair%%:*}
	theirs=${pair#*:}
	diff -u --label "a/$ours" --label "b/$ours" "$dir/$theirs" "$ours" >>"$out" || true
done
if [ "${1:-}" = "-check" ]; then
	if ! cmp -s "$out" fork.patch; then
		echo "fork.patch is out of date: run internal/raft/forkdiff.sh" >&2
		exit 1
	fi
	exit 0
fi
cp "$out" fork.patch
