package membership

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A join that runs out of time reports why its attempts failed, not only
// that time ran out.
func TestJoinReportsTheTellingError(t *testing.T) {
	refused := errors.New("127.0.0.1:1: tls handshake: certificate signed by unknown authority")
	timedOut := fmt.Errorf("127.0.0.1:1: call: dialling: %w", context.DeadlineExceeded)
	assert.Equal(t, refused, moreTelling(refused, timedOut))
	assert.Equal(t, timedOut, moreTelling(nil, timedOut), "nothing better known")
	later := errors.New("127.0.0.1:2: connection refused")
	assert.Equal(t, later, moreTelling(refused, later), "a later reason replaces an earlier one")
}
