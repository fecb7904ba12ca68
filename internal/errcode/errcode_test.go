package errcode_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
)

func TestErrorCodeRoundTrip(t *testing.T) {
	codes := errcode.All()
	require.NotEmpty(t, codes)
	seen := map[string]bool{}
	for _, code := range codes {
		assert.False(t, seen[code], "code %q listed twice", code)
		seen[code] = true
		errs := errcode.Errors(code)
		require.NotEmpty(t, errs, code)
		// An error made of a code's sentinels reads back as that code, and
		// matches every sentinel the code stands for.
		err := fmt.Errorf("wrapped: %w", errors.Join(errs...))
		assert.Equal(t, code, errcode.Of(err), "round trip of %q", code)
		for _, s := range errs {
			assert.ErrorIs(t, err, s, code)
		}
	}
}

func TestErrorCodePrefersTheCautiousCode(t *testing.T) {
	tests := []struct {
		err  error
		code string
	}{
		{&lock.HeldError{Key: "k", Token: 3}, errcode.Locked},
		{fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, lock.ErrUnavailable), errcode.UnknownOutcome},
		{fmt.Errorf("%w: %w", lock.ErrUnavailable, lock.ErrUnknownOutcome), errcode.UnknownOutcome},
		{fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, lock.ErrClosed), errcode.UnknownOutcome},
		{fmt.Errorf("%w: no leader", lock.ErrUnavailable), errcode.Unavailable},
		{lock.ValidateKey(""), errcode.InvalidKey},
		{errors.New("dial tcp: refused"), ""},
		{nil, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.code, errcode.Of(tt.err), "%v", tt.err)
	}
	assert.Nil(t, errcode.Errors("bad_key"), "not a lock code")
}
