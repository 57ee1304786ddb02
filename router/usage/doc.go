// Package usage holds the router's two edits of an OpenAI request body:
// AskUsage makes the backend report the answer's exact token usage, which
// the router needs to charge a tenant what it really used; SetModel names
// another model when a request falls back to it.
//
// Contract: each makes a byte-level edit of the body (one insertion or one
// replacement) and never decodes or re-encodes it; given valid JSON it
// returns valid JSON in which every other top-level member is byte-for-byte
// the same.
//
// This package must not import the router, its other subpackages, the
// policies or the backends.
package usage
