package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// GetRaw sends GET path?query to the client's first endpoint only (never on
// to another: the answer must come from the node asked) and returns the
// answer as it came, whatever its status, at most 16 MiB. It serves tools
// that collect a node's own routes (raftlock debug: metrics, profiles), with
// the client's token and TLS settings; programs want the typed methods.
func (c *Client) GetRaw(ctx context.Context, path string, query url.Values) (status int, body []byte, err error) {
	if c.closed.Load() {
		return 0, nil, fmt.Errorf("api: GET %s: client closed", path)
	}
	endpoint := (*c.endpoints.Load())[0]
	status, body, sent, _, err := c.send(ctx, endpoint, exchange{method: http.MethodGet, path: path, query: query}, nil)
	if err != nil {
		return 0, nil, c.networkError(ctx, "GET "+path, err, sent, false)
	}
	return status, body, nil
}
