package lock_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

func TestErrorCodeRoundTrip(t *testing.T) {
	codes := lock.ErrorCodes()
	require.NotEmpty(t, codes)
	seen := map[string]bool{}
	for _, code := range codes {
		assert.False(t, seen[code], "code %q listed twice", code)
		seen[code] = true
		errs := lock.CodeErrors(code)
		require.NotEmpty(t, errs, code)
		// An error made of a code's sentinels reads back as that code, and
		// matches every sentinel the code stands for.
		err := fmt.Errorf("wrapped: %w", errors.Join(errs...))
		assert.Equal(t, code, lock.ErrorCode(err), "round trip of %q", code)
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
		{&lock.HeldError{Key: "k", Token: 3}, lock.CodeLocked},
		{fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, lock.ErrUnavailable), lock.CodeUnknownOutcome},
		{fmt.Errorf("%w: %w", lock.ErrUnavailable, lock.ErrUnknownOutcome), lock.CodeUnknownOutcome},
		{fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, lock.ErrClosed), lock.CodeUnknownOutcome},
		{fmt.Errorf("%w: no leader", lock.ErrUnavailable), lock.CodeUnavailable},
		{lock.ValidateKey(""), lock.CodeInvalidKey},
		{errors.New("dial tcp: refused"), ""},
		{nil, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.code, lock.ErrorCode(tt.err), "%v", tt.err)
	}
	assert.Nil(t, lock.CodeErrors("bad_key"), "not a lock code")
}
