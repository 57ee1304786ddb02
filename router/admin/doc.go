// Package admin is Sluice's operator API, served on its own listener behind
// a bearer token: the backends with their live load and breaker state;
// adding, removing and draining a backend; reloading the config file; the
// effective config with its secrets redacted. What it changes goes through
// a Runtime, which cmd/sluice implements over the config, so that every
// change is validated and applied as a reload is (a bad one changes
// nothing).
//
// This package must not import configs or any policy.
package admin
