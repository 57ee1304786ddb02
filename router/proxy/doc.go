// Package proxy moves one request's bytes to one chosen endpoint and the
// answer back, and classifies how an attempt ended.
//
// Contracts: the request body is forwarded exactly as received; streamed
// answers are flushed event by event; an attempt that fails before any byte
// was written to the client returns an *AttemptError so the caller can try
// another endpoint, and one that fails after the response started aborts the
// client connection (the only honest signal left).
//
// This package must not import the router, its other subpackages, the
// policies or the backends; it knows URLs, not endpoints.
package proxy
