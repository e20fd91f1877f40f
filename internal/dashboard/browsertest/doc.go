// Package browsertest drives the dashboard in a real browser (Debian's chromium, headless,
// through chromedp) against a real database and real workers. It is a module of its own so
// that importers of pgflow-wasm do not inherit chromedp; `make test` runs it.
package browsertest
