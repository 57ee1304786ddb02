// Package middleware holds the router's cross-cutting HTTP concerns, each a
// func(http.Handler) http.Handler in its own file: request IDs, panic
// recovery and tracing.
//
// Contracts: context values are set under unexported keys and read through
// accessors (RequestIDFrom). Constructors take options structs whose zero
// fields mean documented defaults.
//
// This package must not import the router, its other subpackages, the
// policies or the backends.
package middleware
