package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []frame{
		{typ: frameRequest, id: 1, body: []byte("acquire")},
		{typ: frameResponse, id: 1<<64 - 1, body: []byte{}},
		{typ: frameError, id: 3, body: []byte{errCodeHandler, 'n', 'o'}},
		{typ: frameCancel, id: 4},
	}
	var buf bytes.Buffer
	var hdr [frameHeaderSize]byte
	for i := range frames {
		putFrameHeader(&hdr, &frames[i])
		buf.Write(hdr[:])
		buf.Write(frames[i].body)
	}
	r := bufio.NewReader(&buf)
	for _, want := range frames {
		got, err := readFrame(r, &hdr)
		require.NoError(t, err)
		assert.Equal(t, want.typ, got.typ)
		assert.Equal(t, want.id, got.id)
		assert.Equal(t, len(want.body), len(got.body))
		assert.Equal(t, string(want.body), string(got.body))
	}
	_, err := readFrame(r, &hdr)
	assert.ErrorIs(t, err, io.EOF)
}

func TestReadFrameRejectsTruncatedBody(t *testing.T) {
	var hdr [frameHeaderSize]byte
	b := frameBytes(frameRequest, 1, []byte("abc"), 10)
	_, err := readFrame(bufio.NewReader(bytes.NewReader(b)), &hdr)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// Any bytes give a frame or an error, never a panic, and never an
// allocation beyond MaxFrameSize.
func FuzzReadFrame(f *testing.F) {
	f.Add(frameBytes(frameRequest, 1, []byte("x"), 1))
	f.Add(frameBytes(frameCancel, 2, nil, 0))
	f.Add(frameBytes(frameError, 3, []byte{1, 'e'}, 2))
	f.Add(frameBytes(frameResponse, 4, nil, MaxFrameSize+1))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var hdr [frameHeaderSize]byte
		for {
			fr, err := readFrame(r, &hdr)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errProtocol) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if len(fr.body) > MaxFrameSize {
				t.Fatalf("body of %d bytes", len(fr.body))
			}
			if fr.typ == frameError {
				_ = remoteError("peer", fr.body) // must not panic
			}
		}
	})
}

func TestReadFrameLargeBody(t *testing.T) {
	for _, n := range []int{eagerBodySize - 1, eagerBodySize, eagerBodySize + 1, 3*eagerBodySize + 17, MaxFrameSize} {
		body := bytes.Repeat([]byte{0xa5}, n)
		body[n-1] = 0x5a
		b := frameBytes(frameRequest, 9, body, uint32(n))
		var hdr [frameHeaderSize]byte
		f, err := readFrame(bufio.NewReader(bytes.NewReader(b)), &hdr)
		require.NoError(t, err, "size %d", n)
		assert.True(t, bytes.Equal(body, f.body), "size %d", n)

		_, err = readFrame(bufio.NewReader(bytes.NewReader(b[:len(b)-1])), &hdr)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "size %d truncated", n)
	}
}

// A frame announcing MaxFrameSize but carrying a few bytes costs little memory.
func TestReadFrameDoesNotTrustAnnouncedSize(t *testing.T) {
	b := frameBytes(frameRequest, 1, []byte("tiny"), MaxFrameSize)
	var hdr [frameHeaderSize]byte
	allocs := testing.AllocsPerRun(10, func() {
		readFrame(bufio.NewReader(bytes.NewReader(b)), &hdr)
	})
	assert.Less(t, allocs, 10.0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		readFrame(bufio.NewReader(bytes.NewReader(b)), &hdr)
	}
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(10*(eagerBodySize+8<<10)), "bytes allocated for 10 bogus frames")
}
