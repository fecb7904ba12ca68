package streamwire

import (
	"bufio"
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFramesReadBackAsWritten(t *testing.T) {
	var b []byte
	b = AppendRequest(b, 1, OpAcquire, []byte(`{"key":"k"}`))
	b = AppendRequest(b, 300, OpCancel, nil)
	b = AppendAnswer(b, 1, 200, []byte(`{"token":7}`))
	b = AppendGoAway(b, 300, 503, []byte(`{"error":{}}`))
	r := NewReader(bufio.NewReader(bytes.NewReader(b)), 1<<10)

	p, err := r.Next()
	require.NoError(t, err)
	req, err := ParseRequest(p)
	require.NoError(t, err)
	assert.Equal(t, Request{ID: 1, Op: OpAcquire, Body: []byte(`{"key":"k"}`)}, req)

	p, err = r.Next()
	require.NoError(t, err)
	req, err = ParseRequest(p)
	require.NoError(t, err)
	assert.Equal(t, uint64(300), req.ID)
	assert.Equal(t, OpCancel, req.Op)
	assert.Empty(t, req.Body)

	p, err = r.Next()
	require.NoError(t, err)
	a, err := ParseAnswer(p)
	require.NoError(t, err)
	assert.Equal(t, Answer{ID: 1, Status: 200, Body: []byte(`{"token":7}`)}, a)

	p, err = r.Next()
	require.NoError(t, err)
	a, err = ParseAnswer(p)
	require.NoError(t, err)
	assert.Equal(t, Answer{ID: 0, Status: 503, Last: 300, Body: []byte(`{"error":{}}`)}, a)

	_, err = r.Next()
	assert.Equal(t, io.EOF, err, "the end between frames is a clean end")
}

func TestMalformedFrames(t *testing.T) {
	for name, in := range map[string][]byte{
		"over the limit":    AppendRequest(nil, 1, OpAcquire, make([]byte, 100)),
		"cut inside":        AppendRequest(nil, 1, OpAcquire, []byte(`{}`))[:3],
		"cut in the length": {0x80},
		"empty frame":       {0},
		"length too long":   {0xff, 0xff, 0xff, 0xff, 0x7f},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewReader(bufio.NewReader(bytes.NewReader(in)), 64).Next()
			assert.ErrorIs(t, err, ErrFrame)
		})
	}
	for name, p := range map[string][]byte{"no id": {}, "id 0": {0, 1}, "no op": {5}} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRequest(p)
			assert.ErrorIs(t, err, ErrFrame)
		})
	}
	for name, p := range map[string][]byte{"no status": {1}, "status 42": {1, 42}, "go-away without last": {0, 0xc8, 0x01}} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAnswer(p)
			assert.ErrorIs(t, err, ErrFrame)
		})
	}
}

// FuzzFrames: any bytes read as frames give frames or an error, never a
// panic, and what parses writes back to the same bytes.
func FuzzFrames(f *testing.F) {
	f.Add(AppendRequest(AppendAnswer(nil, 3, 409, []byte(`{}`)), 2, OpRelease, []byte(`{"key":"a"}`)))
	f.Add(AppendGoAway(nil, 9, 400, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bufio.NewReader(bytes.NewReader(in)), 1<<16)
		for {
			p, err := r.Next()
			if err != nil {
				return
			}
			// Lengths and numbers may come in longer forms than the writer's;
			// what they say writes back and reads again the same.
			if req, err := ParseRequest(p); err == nil {
				again, err := ParseRequest(payload(t, AppendRequest(nil, req.ID, req.Op, req.Body)))
				require.NoError(t, err)
				assert.Equal(t, req, again)
			}
			if a, err := ParseAnswer(p); err == nil {
				var out []byte
				if a.ID == 0 {
					out = AppendGoAway(nil, a.Last, a.Status, a.Body)
				} else {
					out = AppendAnswer(nil, a.ID, a.Status, a.Body)
				}
				again, err := ParseAnswer(payload(t, out))
				require.NoError(t, err)
				assert.Equal(t, a, again)
			}
		}
	})
}

// payload is the one frame in b.
func payload(t *testing.T, b []byte) []byte {
	p, err := NewReader(bufio.NewReader(bytes.NewReader(b)), len(b)).Next()
	require.NoError(t, err)
	return append([]byte(nil), p...)
}
