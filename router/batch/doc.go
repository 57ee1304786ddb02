// Package batch is OpenAI's Batch API on Sluice's own fleet: /v1/files
// (upload with purpose "batch", list, retrieve, content, delete) and
// /v1/batches (create, retrieve, list, cancel), served by a Service, and a
// Runner that runs the batches' lines in the capacity interactive traffic
// leaves.
//
// A batch's input is a JSONL file of {custom_id, method, url, body}
// lines, validated line by line before it runs (every problem names its
// line). Each line runs as an in-process request through the router's own
// handler, as the batch's tenant (so its tier's models and token limits
// apply) and in the flex service class (so admission runs it only in spare
// capacity and sheds it first). The answers go to an output file (2xx) and
// an error file (the rest), in OpenAI's line format, when the batch ends:
// completed, expired (with what finished) or cancelled.
//
// Contracts: a tenant sees only its own files and batches (another's are
// 404, as if absent); file contents live in the data directory, streamed
// in and out, never whole in memory; batch state and line progress live in
// a Store (DiskStore for one replica, surviving restarts; RedisStore for
// replicas that share batches); a line is claimed (a lease, renewed while
// it runs) before it runs and its result recorded once, so a dead
// replica's lines are run by another and none is answered twice; a line
// refused for want of capacity or by rate limits is retried later, never
// failed; every goroutine belongs to Runner.Run and stops with its
// context.
//
// This package must not import the router or its other subpackages: it
// reaches inference only through the http.Handler it is given, and learns
// who calls through the Owner function cmd/sluice wires in.
package batch
