// Package docscheck holds a test that keeps the documentation honest: every
// make target, command-line flag and CONSUMER_* environment variable that
// README.md, CONTRIBUTING.md, CHANGELOG.md, config/samples/README.md or
// docs/*.md mention must exist in the Makefile and in the binaries as built
// from this tree. A second test decodes the README's example object strictly,
// and a third checks that every relative link names an existing file and
// heading anchor.
package docscheck
