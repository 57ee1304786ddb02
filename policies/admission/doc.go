// Package admission is the admit stage of the request pipeline: when the
// fleet is at its target load, requests wait in the router, ordered by
// service class (OpenAI's service_tier: priority, default, flex), then by
// their tier's priority, then fairly between tenants by the tokens each has
// been served, then by arrival; each is bound to a backend only when that
// backend has room (late binding), never parked early in a backend's queue.
//
// Contracts: Queue is the pure ordering (no clock, no goroutines), shared
// by the live Gate and the fleet simulator; Gate never blocks a request
// when admission is off or the fleet has room and nobody waits; a waiter
// whose client leaves is out of the queue at once; shedding takes flex
// first and priority last.
//
// This package must not import the router.
package admission
