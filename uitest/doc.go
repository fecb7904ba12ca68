// Package uitest drives raftlock's web console in a headless Chromium, and
// validates the served OpenAPI description with an OpenAPI 3 validator. It is
// a module of its own so that the browser driver (chromedp) and the
// validator (kin-openapi) are dependencies of these tests only, never of
// programs that embed raftlock.
//
//	cd uitest && go test ./...
//
// The test skips, saying so, when no Chromium or Chrome is installed
// (Debian: apt-get install chromium). Set RAFTLOCK_UI_SCREENSHOT=PATH to
// save the screenshot it takes there (the README's docs/console.png is made
// this way).
package uitest
