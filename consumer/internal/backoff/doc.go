// Package backoff is the runtime's exponential backoff with full jitter
// (Backoff, At) and a sleep that ends with its context (Sleep).
//
// File map:
//   - backoff.go: Backoff, At, Sleep
package backoff
