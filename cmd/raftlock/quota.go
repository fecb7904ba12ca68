package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// quotaFlag is a quota flag (-max-locks, -max-sessions,
// -max-total-waiters): a count from 1 to maxQuotaFlag, or "unlimited".
// Its value is the cluster.Config field's: cluster.Unlimited for
// unlimited. 0 is refused rather than read as "unlimited" or "default":
// either reading would surprise someone, and a limit of 0 would refuse
// every new lock.
type quotaFlag int

// maxQuotaFlag is the largest count a quota flag takes: past it (hundreds
// of GB of state per member), "unlimited" says what is meant.
const maxQuotaFlag = 1_000_000_000

func (q *quotaFlag) String() string {
	if *q == cluster.Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(int(*q))
}

func (q *quotaFlag) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "unlimited") {
		*q = cluster.Unlimited
		return nil
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(s), "_", ""), 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("want a whole number from 1 to %d, or unlimited", maxQuotaFlag)
	case v == 0:
		return fmt.Errorf("0 would refuse every new one: give a positive number, or unlimited")
	case v < 0 || v > maxQuotaFlag:
		return fmt.Errorf("want a number from 1 to %d, or unlimited (got %d)", maxQuotaFlag, v)
	}
	*q = quotaFlag(v)
	return nil
}

// quotaLine shows a node's quotas in raftlock status: each one's use of
// its limit, and the refusals, if any.
func quotaLine(q api.Quotas) string {
	var parts []string
	var refused uint64
	for _, c := range []struct {
		name string
		q    api.Quota
	}{{"keys", q.Locks}, {"sessions", q.Sessions}, {"waiters", q.Waiters}} {
		limit := "unlimited"
		if c.q.Limit > 0 {
			limit = strconv.Itoa(c.q.Limit)
		}
		parts = append(parts, fmt.Sprintf("%s %d/%s", c.name, c.q.Used, limit))
		refused += c.q.Refused
	}
	line := strings.Join(parts, ", ")
	if refused > 0 {
		line += fmt.Sprintf(" (refused %d while leading: see the log)", refused)
	}
	return line
}
