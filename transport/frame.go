package transport

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Connection kinds: the first byte a dialer writes on every new connection
// (inside TLS when TLS is on). The listener routes the connection by it.
const (
	kindRaft byte = 'R' // hashicorp/raft's NetworkTransport protocol follows
	kindRPC  byte = 'F' // forwarding RPC frames follow (wire version 1)
)

// MaxFrameSize bounds one RPC request or response body.
const MaxFrameSize = 16 << 20

// frameType is the first byte of a frame header.
type frameType byte

const (
	frameRequest  frameType = 1 // client -> server: body is the request
	frameResponse frameType = 2 // server -> client: body is the handler's answer
	frameError    frameType = 3 // server -> client: body is an error code byte and a message
	frameCancel   frameType = 4 // client -> server: the caller gave up; empty body
)

// frameHeaderSize is type (1) + request ID (8, big endian) + body length (4, big endian).
const frameHeaderSize = 13

// Codes carried in the first byte of an error frame's body.
const (
	errCodeHandler  byte = 1 // the handler returned an error (or there is no handler)
	errCodeTooLarge byte = 2 // the handler's answer exceeded MaxFrameSize
)

const (
	// writeTimeout bounds one batch of writes: a peer that stops reading for
	// this long has its connection dropped rather than wedging every call
	// queued behind it. 16 MiB in 10s needs only 1.6 MB/s.
	writeTimeout = 10 * time.Second
	// ioBufferSize is the size of each connection's read and write buffers.
	ioBufferSize = 32 << 10
)

type frame struct {
	typ  frameType
	id   uint64
	body []byte
	// call is set on client requests: the writer marks it written when it
	// takes the frame, or skips the frame if the caller already gave up.
	call *call
}

// readFrame reads one frame. Bad frames return an error matching
// errProtocol (and ErrTooLarge for an oversized one); the connection must
// then be closed, since the stream can no longer be trusted.
func readFrame(r *bufio.Reader, hdr *[frameHeaderSize]byte) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	f := frame{typ: frameType(hdr[0]), id: binary.BigEndian.Uint64(hdr[1:9])}
	n := binary.BigEndian.Uint32(hdr[9:13])
	switch f.typ {
	case frameRequest, frameResponse:
	case frameError:
		if n == 0 {
			return frame{}, fmt.Errorf("%w: error frame without a code", errProtocol)
		}
	case frameCancel:
		if n != 0 {
			return frame{}, fmt.Errorf("%w: cancel frame with a %d-byte body", errProtocol, n)
		}
	default:
		return frame{}, fmt.Errorf("%w: unknown frame type %d", errProtocol, hdr[0])
	}
	if n > MaxFrameSize {
		return frame{}, fmt.Errorf("%w: %w: %d bytes (limit %d)", errProtocol, ErrTooLarge, n, MaxFrameSize)
	}
	if n > 0 {
		body, err := readBody(r, int(n))
		if err != nil {
			return frame{}, err
		}
		f.body = body
	}
	return f, nil
}

// eagerBodySize is the largest body allocated in full before it arrives.
// Larger bodies grow as their bytes come in, so a peer cannot make us
// allocate MaxFrameSize per connection just by announcing it.
const eagerBodySize = 64 << 10

func readBody(r io.Reader, n int) ([]byte, error) {
	body := make([]byte, 0, min(n, eagerBodySize))
	for len(body) < n {
		if len(body) == cap(body) {
			body = slices.Grow(body, min(n-len(body), cap(body)))
		}
		m, err := io.ReadFull(r, body[len(body):min(n, cap(body))])
		body = body[:len(body)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return body, nil
}

func putFrameHeader(hdr *[frameHeaderSize]byte, f *frame) {
	hdr[0] = byte(f.typ)
	binary.BigEndian.PutUint64(hdr[1:9], f.id)
	binary.BigEndian.PutUint32(hdr[9:13], uint32(len(f.body)))
}

// framedConn is what both ends of an RPC connection share: the socket, the
// read buffer, and an outbox drained by one writer goroutine. Senders never
// block on the socket: they append to the outbox and wake the writer, which
// writes everything queued in one flush (so pipelined calls share syscalls).
type framedConn struct {
	nc   net.Conn
	br   *bufio.Reader
	peer string        // remote address, for errors and logs
	kick chan struct{} // size 1: one pending wake-up is all the writer needs
	done chan struct{} // closed when the connection has failed or been closed

	mu    sync.Mutex // protects queue and err, and the owner's per-request map
	queue []frame
	err   error // why the connection ended; nil while it is live

	spare []frame // the writer's recycled batch; writer goroutine only
}

func newFramedConn(nc net.Conn, peer string) framedConn {
	return framedConn{
		nc:   nc,
		br:   bufio.NewReaderSize(nc, ioBufferSize),
		peer: peer,
		kick: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
}

// enqueueLocked queues f; the caller holds mu and calls wake after unlocking.
func (c *framedConn) enqueueLocked(f frame) { c.queue = append(c.queue, f) }

func (c *framedConn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// dead reports whether the connection has ended.
func (c *framedConn) dead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// writeLoop writes queued frames until the connection ends. It returns the
// write error that ended it, or nil when done was closed by someone else.
func (c *framedConn) writeLoop() error {
	bw := bufio.NewWriterSize(c.nc, ioBufferSize)
	var hdr [frameHeaderSize]byte
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return nil
		}
		// Yield once so that callers woken alongside us can queue their
		// frames into this flush: halves syscalls under load (see
		// BenchmarkCallParallel) and costs a serial caller nothing.
		runtime.Gosched()
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.mu.Unlock()
			continue
		}
		batch := c.queue
		c.queue = c.spare // double buffering: senders fill one slice while we write the other
		c.spare = nil
		for i := range batch {
			if cl := batch[i].call; cl != nil {
				if cl.abandoned {
					batch[i].typ = 0 // the caller gave up before we took it: never send it
				} else {
					cl.written = true
				}
			}
		}
		c.mu.Unlock()
		var err error
		if err = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout)); err == nil {
			for i := range batch {
				if batch[i].typ == 0 {
					continue
				}
				putFrameHeader(&hdr, &batch[i])
				bw.Write(hdr[:]) // errors are sticky; Flush reports them
				bw.Write(batch[i].body)
			}
			err = bw.Flush()
		}
		clear(batch)
		c.spare = batch[:0]
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
}
