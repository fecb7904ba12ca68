// Package httpwire is the JSON of the HTTP API, written and read by one
// piece of code for both sides: its request and answer types (wire.go,
// batch.go), which package api, the client, names by aliases and package
// apiserver, the server, serves; and their codec:
//
//   - requests (request.go): the client's EncodeRequest, and the node's
//     DecodeFast, a one-pass fast path for the plain bodies a program
//     sends (package apiserver decodes the rest strictly, and names the
//     field at fault);
//   - answers (answer.go): the node's EncodeAnswer and AppendAnswer, and
//     the client's DecodeAnswer, fast paths for a lock cycle's answers
//     that give byte for byte, value for value, what encoding/json would;
//   - the batch envelopes (batch.go), written by hand on both sides.
//
// The JSON itself (names, types, units) is part of the HTTP API, which
// docs/http.md describes; golden tests in package apiserver hold it. The
// package depends on package lock and the standard library only, so that
// the client links nothing of the server.
package httpwire
