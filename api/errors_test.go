package api_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
)

// Every lock error code a node answers comes back from the client as an
// error matching the same lock sentinels.
func TestServerErrorMatchesTheLockSentinelsOfItsCode(t *testing.T) {
	for _, code := range errcode.All() {
		err := &api.ServerError{StatusCode: 503, Code: code, Message: "m"}
		for _, s := range errcode.Errors(code) {
			assert.ErrorIs(t, err, s, code)
		}
		assert.NotErrorIs(t, err, api.ErrUnexpectedResponse, code)
	}
	assert.ErrorIs(t, &api.ServerError{Code: api.CodeCanceled}, lock.ErrNotHeld)
	assert.ErrorIs(t, &api.ServerError{Code: api.CodeHTTPSRequired}, api.ErrBadRequest)
	assert.ErrorIs(t, &api.ServerError{Code: api.CodeNotImplemented}, errors.ErrUnsupported)
	assert.ErrorIs(t, &api.ServerError{Code: "bad_key"}, api.ErrUnexpectedResponse)
}
