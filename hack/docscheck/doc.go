// Package docscheck holds a test that keeps the documentation honest: every
// make target, command-line flag and CONSUMER_* environment variable that
// README.md, CONTRIBUTING.md or docs/*.md mention must exist in the Makefile
// and the binaries as built from this tree.
package docscheck
