// Package release holds the tests of the release path: `make build` and
// `make build-installer` with a VERSION stamp both binaries and tag every
// image of the rendered install with it (.github/workflows/release.yml runs
// the same targets on a version tag).
package release
