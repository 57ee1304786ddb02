// Package backends owns what the router knows about the servers behind it:
// each Endpoint's identity, its live load as seen by this replica (typed
// atomics), its passive health, and the Pool of endpoints that serve one model.
//
// Contracts: an *Endpoint is shared by every request and must not be copied;
// its getters read atomics only and never allocate, so routing policies may
// call them on every pick. A Pool is immutable once built; a reload builds a
// new one and swaps it whole.
//
// This package must not import the router or the policies; it knows nothing
// about tenants, admission or HTTP handlers.
package backends
