package admin

import (
	_ "embed" // the status page's files
	"net/http"

	"github.com/go-chi/chi/v5"
)

// The status page: plain HTML, CSS and JS, no build step and nothing
// fetched from elsewhere. A missing file fails the build.
var (
	//go:embed status/index.html
	pageHTML []byte
	//go:embed status/app.js
	pageJS []byte
	//go:embed status/app.css
	pageCSS []byte
)

// pagePolicy keeps the page to its own origin: its script holds the admin
// token, so nothing else may run in it, frame it, or be sent its address.
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// servePage routes the page and its assets on r.
func servePage(r chi.Router) {
	asset := func(body []byte, ctype string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Security-Policy", pagePolicy)
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Cache-Control", "no-cache")
			h.Set("Content-Type", ctype)
			_, _ = w.Write(body)
		}
	}
	r.Get("/status", asset(pageHTML, "text/html; charset=utf-8"))
	r.Get("/status/app.js", asset(pageJS, "text/javascript; charset=utf-8"))
	r.Get("/status/app.css", asset(pageCSS, "text/css; charset=utf-8"))
}
