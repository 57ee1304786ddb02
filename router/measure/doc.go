// Package measure times an upstream answer as it is relayed to the client:
// time to first byte of a stream, and decode throughput, found by scanning
// the bytes as they pass, never by decoding and re-encoding them.
//
// Contracts: a Writer forwards every byte and call unchanged (http.Flusher
// and the other optional interfaces keep working through Unwrap and
// FlushError); it keeps a fixed amount of state whatever the size of the
// answer; it is used by one goroutine, the handler's.
//
// This package must not import the router, its other subpackages, the
// policies or the backends; the router feeds what it measures to the
// endpoint.
package measure
