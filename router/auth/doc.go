// Package auth is the first stage of the request pipeline: it finds the
// tenant an API key belongs to. A Directory holds the configured tenants
// and the SHA-256 hashes of their keys (never the keys); Authenticate reads
// the bearer token of a request and returns its Tenant, or an error the
// router answers with 401.
//
// Contracts: keys are compared as SHA-256 digests in constant time; a
// Directory is immutable once built (a reload builds a new one); an empty
// Directory is open: every request passes as no tenant; a tenant put in a
// request's context (WithTenant, in-process only) is resolved by name in the
// directory before any header is read.
//
// This package must not read request bodies or write responses.
package auth
