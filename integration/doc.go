// Package integration is the evidence that raftlock never grants one lock
// twice: multi-node and multi-process tests that run real clusters under
// faults, record what clients saw, and check it. It holds tests only;
// README.md in this directory says how to run them, and what each scenario
// does and checks.
package integration
