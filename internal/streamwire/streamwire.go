// Package streamwire frames the operations and answers of the HTTP API's
// binary stream (GET /v1/stream, upgraded): the Go client (package api)
// writes frames, the node (package apiserver) reads them, and back.
//
// Over HTTP/1.1 every lock operation is a request and an answer of its
// own, or a POST /v1/batch whose answer waits for the slowest of its
// operations. On the stream, one connection carries any number of
// operations in flight, each answered as soon as it is done, in any order,
// without HTTP headers per operation. The bodies stay the JSON objects the
// operations' own routes take and answer, so that a streamed operation is
// decoded, checked and answered exactly as on its route.
//
// A frame is a uvarint length and that many bytes of payload:
//
//	request: uvarint id > 0 · op byte · body (the route's JSON request; none for OpCancel)
//	answer:  uvarint id > 0 · uvarint HTTP status · body (the route's JSON answer)
//	go-away: uvarint 0 · uvarint HTTP status · uvarint last id · JSON error body
//
// The client numbers its requests 1, 2, 3, … in the order it writes them.
// A go-away says the node reads nothing more: requests numbered up to
// "last" were read and are answered; later ones were never read, so the
// client may send them elsewhere. The node then closes the stream once it
// has answered.
package streamwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Protocol is the Upgrade header's value that asks for the stream.
const Protocol = "raftlock-stream/1"

// MaxInflight bounds the operations one stream may have in flight at the
// node: the client queues beyond it, the node answers 429 to an operation
// over it.
const MaxInflight = 1024

// Operation codes of request frames.
const (
	OpAcquire byte = 1 // the body of POST /v1/acquire (waits allowed)
	OpRelease byte = 2 // the body of POST /v1/release
	OpExtend  byte = 3 // the body of POST /v1/extend
	// OpCancel withdraws the operation with the frame's id, as a closed
	// connection withdraws its request: a waiting acquire gives up. It has
	// no body and no answer of its own; the canceled operation is answered.
	OpCancel byte = 4
)

// ErrFrame is what a malformed frame's error matches.
var ErrFrame = errors.New("malformed stream frame")

// AppendRequest appends a request frame.
func AppendRequest(dst []byte, id uint64, op byte, body []byte) []byte {
	n := uvarintLen(id) + 1 + len(body)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, id)
	dst = append(dst, op)
	return append(dst, body...)
}

// AppendAnswer appends an answer frame.
func AppendAnswer(dst []byte, id uint64, status int, body []byte) []byte {
	n := uvarintLen(id) + uvarintLen(uint64(status)) + len(body)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, id)
	dst = binary.AppendUvarint(dst, uint64(status))
	return append(dst, body...)
}

// AppendGoAway appends a go-away frame: the node has read requests up to
// last and reads no more, for the reason in body (a JSON error body) with
// HTTP status.
func AppendGoAway(dst []byte, last uint64, status int, body []byte) []byte {
	n := 1 + uvarintLen(uint64(status)) + uvarintLen(last) + len(body)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, 0)
	dst = binary.AppendUvarint(dst, uint64(status))
	dst = binary.AppendUvarint(dst, last)
	return append(dst, body...)
}

// Request is a decoded request frame.
type Request struct {
	ID   uint64
	Op   byte
	Body []byte // aliases the payload
}

// ParseRequest decodes a request frame's payload.
func ParseRequest(p []byte) (Request, error) {
	id, n := binary.Uvarint(p)
	if n <= 0 || id == 0 {
		return Request{}, fmt.Errorf("%w: request without an id", ErrFrame)
	}
	if n == len(p) {
		return Request{}, fmt.Errorf("%w: request %d without an operation", ErrFrame, id)
	}
	return Request{ID: id, Op: p[n], Body: p[n+1:]}, nil
}

// Answer is a decoded answer or go-away frame (ID 0).
type Answer struct {
	ID     uint64
	Status int
	Last   uint64 // a go-away's last request read
	Body   []byte // aliases the payload
}

// ParseAnswer decodes an answer or go-away frame's payload.
func ParseAnswer(p []byte) (Answer, error) {
	id, n := binary.Uvarint(p)
	if n <= 0 {
		return Answer{}, fmt.Errorf("%w: answer without an id", ErrFrame)
	}
	p = p[n:]
	status, n := binary.Uvarint(p)
	if n <= 0 || status < 100 || status > 599 {
		return Answer{}, fmt.Errorf("%w: answer %d without a valid HTTP status", ErrFrame, id)
	}
	p = p[n:]
	a := Answer{ID: id, Status: int(status)}
	if id == 0 {
		if a.Last, n = binary.Uvarint(p); n <= 0 {
			return Answer{}, fmt.Errorf("%w: go-away without the last request read", ErrFrame)
		}
		p = p[n:]
	}
	a.Body = p
	return a, nil
}

// Reader reads frames from a buffered stream.
type Reader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewReader reads frames of at most max payload bytes from r.
func NewReader(r *bufio.Reader, max int) *Reader { return &Reader{r: r, max: max} }

// Next returns the next frame's payload, valid until the next call. A
// frame over the limit, or a stream cut inside a frame, is an error: the
// stream cannot be read further. io.EOF: the stream ended between frames.
func (r *Reader) Next() ([]byte, error) {
	n, err := r.length()
	if err != nil {
		return nil, err
	}
	if n == 0 || n > uint64(r.max) {
		return nil, fmt.Errorf("%w: a frame of %d bytes (the limit is %d)", ErrFrame, n, r.max)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n, max(int(n), 4096))
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return nil, fmt.Errorf("%w: stream cut inside a frame of %d bytes", ErrFrame, n)
		}
		return nil, err
	}
	return r.buf, nil
}

// length reads a frame's length: a uvarint of at most 4 bytes (larger
// than any limit a reader has).
func (r *Reader) length() (uint64, error) {
	var n uint64
	for i := 0; ; i++ {
		b, err := r.r.ReadByte()
		if err != nil {
			if i > 0 && err == io.EOF {
				return 0, fmt.Errorf("%w: stream cut inside a frame's length", ErrFrame)
			}
			return 0, err // io.EOF between frames, or the connection's error
		}
		if i == 4 {
			return 0, fmt.Errorf("%w: a frame's length of more than 4 bytes", ErrFrame)
		}
		n |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return n, nil
		}
	}
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
