// Package event holds the types a handler sees: the decoded Event and its
// Header, the Handler and ExternalHandler signatures, the error markers that
// steer retries (Permanent, Unavailable, RetryLater), the Reason an event
// was not handled normally and its Policy, the W3C TraceContext of a record,
// and the headers of a dead letter.
//
// It is the runtime's leaf: it imports nothing of the runtime but the
// envelope's reasons, and the public package consumer re-exports every name
// in it, so handlers may use either.
//
// File map:
//   - event.go: Event, Header, Handler, ExternalHandler, the event in a
//     context, Permanent, Unavailable, ErrStopped
//   - retrylater.go: RetryLater
//   - reason.go: Reason, Policy and their names
//   - trace.go: TraceContext and the traceparent header
//   - deadletter.go: the dlq-* headers of a dead letter
package event
