// Package usage edits an OpenAI request body so that the backend reports the
// answer's exact token usage, which the router needs to charge a tenant what
// it really used.
//
// Contract: AskUsage makes a byte-level edit of the body (one insertion or
// one replacement) and never decodes or re-encodes it; given valid JSON it
// returns valid JSON in which every top-level member but stream_options is
// byte-for-byte the same.
//
// This package must not import the router, its other subpackages, the
// policies or the backends.
package usage
