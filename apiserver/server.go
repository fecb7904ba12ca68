package apiserver

import (
	"net/http"
	"time"
)

// Server timeouts NewServer sets.
const (
	// ServerReadHeaderTimeout bounds reading a request's headers (slowloris).
	ServerReadHeaderTimeout = 10 * time.Second
	// ServerReadTimeout bounds reading a whole request, body included. It
	// does not cut long-polls: net/http clears the read deadline once the
	// body is read, and Handler reads every body to its end.
	ServerReadTimeout = 30 * time.Second
	// ServerIdleTimeout closes keep-alive connections idle this long.
	ServerIdleTimeout = 2 * time.Minute
	// ServerMaxHeaderBytes bounds a request's headers.
	ServerMaxHeaderBytes = 64 << 10
)

// NewServer returns an *http.Server for h on addr with timeouts fit for the
// API: every phase of a request is bounded, yet an acquire may long-poll up
// to its wait (at most lock.MaxWait). There is deliberately no WriteTimeout,
// which would end every long-poll at the same fixed time; Handler instead
// gives each answer a write deadline of its own: the operation's time limit
// (the wait plus Config.OpTimeout) and some slack.
//
// Serve it with ListenAndServe (or Serve on your own listener) and stop it
// with Shutdown: Shutdown waits for long-polls, so give its context a
// deadline, then Close. The timeouts close connections that send no
// request (ServerReadHeaderTimeout) or stay idle (ServerIdleTimeout), but
// bound neither how many are open at once: serve on a LimitListener (the
// agent does, -max-http-conns) so that a client opening thousands cannot
// use up the process's file descriptors.
//
// When h is a *Handler, Shutdown also ends its console event streams
// (GET /v1/events), which would otherwise hold Shutdown until they end,
// and tells the Go clients' binary streams (GET /v1/stream) to go away:
// wait for those with Handler.CloseStreams.
func NewServer(addr string, h http.Handler) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		ReadTimeout:       ServerReadTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerMaxHeaderBytes,
	}
	if api, ok := h.(*Handler); ok {
		srv.RegisterOnShutdown(api.console.shutdown)
		srv.RegisterOnShutdown(api.streams.goAway)
	}
	return srv
}
