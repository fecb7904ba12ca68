package integration

import (
	"context"
	"fmt"
	"time"
)

// pollUntil calls check every interval until it returns nil or ctx ends;
// then the error names what was awaited and check's last complaint.
func pollUntil(ctx context.Context, every time.Duration, what string, check func(context.Context) error) error {
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (%v)", what, ctx.Err(), last)
		case <-time.After(every):
		}
	}
}
