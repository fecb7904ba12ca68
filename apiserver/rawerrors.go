package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/raftlock/raftlock/api"
)

// Go's net/http answers some requests by itself, before any handler runs,
// by writing fixed text/plain bytes straight to the connection: 431 for
// headers over MaxHeaderBytes, 400 for a malformed request line or header
// (or a missing Host), 505 for an HTTP version it does not speak, 501 for
// a transfer encoding it does not know, and, on an HTTPS port, a bare 400
// "Client sent an HTTP request to an HTTPS server". No http.Server option
// changes those bytes. JSONErrorListener does: it recognizes them on their
// way out and writes the same status as a JSON error answer instead.

// JSONErrorListener wraps ln, the listener an API server (NewServer)
// serves, plain or TLS (ServeTLS wraps it in TLS itself), so that the
// answers net/http gives by itself are JSON with a code like every other
// answer of the API (doc.go lists which). It changes nothing else: every
// other byte goes through as it is. The agent serves its API through it;
// a program that embeds the API should too.
func JSONErrorListener(ln net.Listener) net.Listener { return jsonErrorListener{ln} }

type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

// jsonErrorConn rewrites net/http's own error answers, each written by one
// Write call of known form, that a handler's answer cannot take: it would
// carry a Date header, and net/http sorts headers, so Connection would come
// before Content-Type.
type jsonErrorConn struct{ net.Conn }

// serverErrorHeaders follow the status line of net/http's answer to a
// request it cannot parse (its errorHeaders); the text after them says why.
const serverErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// plainHTTPOnTLSAnswer is what net/http writes, unencrypted, to a client
// that speaks plain HTTP to a TLS port.
const plainHTTPOnTLSAnswer = "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"

func (c *jsonErrorConn) Write(b []byte) (int, error) {
	if len(b) < 5 || !bytes.HasPrefix(b, []byte("HTTP/")) {
		return c.Conn.Write(b) // the common case: an answer of the handler, or TLS records
	}
	var answer []byte
	if string(b) == plainHTTPOnTLSAnswer {
		answer = jsonAnswer("HTTP/1.0", http.StatusBadRequest, api.CodeHTTPSRequired,
			"api: this node serves HTTPS and the request came in plain HTTP: use an https:// address")
	} else if status, why, ok := parseServerError(b); ok {
		answer = jsonAnswer("HTTP/1.1", status, rawErrorCode(status), "api: the node's HTTP server refused the request: "+why)
	}
	if answer == nil {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(b), nil
}

// parseServerError recognizes b as net/http's own error answer: "HTTP/1.1
// NNN text", serverErrorHeaders, then the reason, all in one write.
func parseServerError(b []byte) (status int, why string, ok bool) {
	end := bytes.Index(b, []byte("\r\n"))
	if end < len("HTTP/1.1 NNN") || !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) || !bytes.HasPrefix(b[end:], []byte(serverErrorHeaders)) {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(b[len("HTTP/1.1 ") : len("HTTP/1.1 ")+3]))
	if err != nil || status < 400 || status > 599 {
		return 0, "", false
	}
	return status, string(b[end+len(serverErrorHeaders):]), true
}

// CloseWrite lets net/http half-close the connection after a 431, as it
// does on a bare TCP connection, so that the client reads the answer.
func (c *jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// rawErrorCode is the code of a status net/http answers by itself.
func rawErrorCode(status int) string {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return api.CodeHeadersTooLarge
	case http.StatusHTTPVersionNotSupported, http.StatusNotImplemented:
		return api.CodeUnsupportedProtocol
	default:
		return api.CodeBadRequest
	}
}

// jsonAnswer is a whole HTTP answer with an error body, closing the
// connection as net/http's own answer would.
func jsonAnswer(proto string, status int, code, msg string) []byte {
	body, _ := json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
	body = append(body, '\n')
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %s\r\n", proto, status, http.StatusText(status))
	fmt.Fprintf(&b, "Content-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}
