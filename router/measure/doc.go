// Package measure times and counts an upstream answer as it is relayed to
// the client: time to first byte of a stream, decode throughput, the token
// usage the backend reported (for a stream, the usage chunk or vLLM's
// running usage; for a whole answer, its usage object) and, for a stream cut
// short, how many token events the client got. It finds them by scanning the
// bytes as they pass, never by decoding and re-encoding them.
//
// Contracts: a Writer forwards every byte and call unchanged (http.Flusher
// and the other optional interfaces keep working through Unwrap and
// FlushError), except that with StripUsageChunk it removes the stream's
// usage chunk, which the router asked for on the client's behalf, and holds
// back at most one event, at most 16 KiB, until it knows the event is not
// that chunk; it keeps a fixed amount of state whatever the size of the
// answer and allocates nothing per event; it is used by one goroutine, the
// handler's.
//
// This package must not import the router, its other subpackages, the
// policies or the backends; the router feeds what it measures to the
// endpoint and to the tenant's account.
package measure
