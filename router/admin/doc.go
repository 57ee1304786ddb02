// Package admin is Sluice's operator API, served on its own listener behind
// a bearer token: the backends with their live load and breaker state;
// adding, removing and draining a backend; reloading the config file; the
// effective config with its secrets redacted. What it changes goes through
// a Runtime, which cmd/sluice implements over the config, so that every
// change is validated and applied as a reload is (a bad one changes
// nothing).
//
// It also serves the live status page: GET /status is a static page
// (embedded, no build step, nothing fetched from elsewhere, served without
// the token because it holds no data) whose script reads GET /admin/status
// with the token. A Monitor samples the Source every few seconds into a
// bounded ring, so that a page opened now charts the last minutes; every
// count is what this router replica saw.
//
// This package must not import configs, any policy, or another router
// package.
package admin
