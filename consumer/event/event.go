package event

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Event is one decoded Kafka record handed to a Handler.
type Event struct {
	// ID is the event id from the envelope, a UUID v7: the dedup key.
	ID uuid.UUID
	// Type from the envelope ("type" field or ce_type), may be empty.
	Type string
	// OccurredAt from the envelope, else the UUID v7 timestamp.
	OccurredAt time.Time
	// Payload is the message value, or the envelope's payload field when
	// one is configured. It must not be modified.
	Payload []byte
	// Key of the Kafka record.
	Key []byte
	// Headers of the Kafka record.
	Headers []Header

	Topic     string
	Partition int
	Offset    int64
	// Deduplicated is false only for an out-of-window event handled under
	// PolicyProcess: it was not recorded in the dedup table.
	Deduplicated bool
}

// Header returns the value of the last header named key.
func (e *Event) Header(key string) ([]byte, bool) {
	for i := len(e.Headers) - 1; i >= 0; i-- {
		if e.Headers[i].Key == key {
			return e.Headers[i].Value, true
		}
	}
	return nil, false
}

// Handler applies one new event. Everything it writes through tx commits
// atomically with the event's dedup row; it must not commit or roll back tx.
// It runs under a savepoint: an error undoes only this event's writes.
// A statement that failed makes the event fail even if the handler swallows
// the error and returns nil, and so does an argument pgx can't encode (both
// are the event's failure, never a database outage). A handler that ends the
// transaction with SQL (COMMIT, ROLLBACK) or returns with a result still open
// (Rows, BatchResults) fails at once with reason handler_failed.
//
// An error is retried (HandlerMaxAttempts, exponential backoff), then the
// event is dead-lettered. Wrap it with Permanent to dead-letter at once, or
// with Unavailable when a dependency is down: then the whole batch is rolled
// back and retried later, without dead-lettering and without committing.
//
// ctx carries the event (EventFromContext) and the W3C trace context from the
// traceparent header (TraceFromContext).
type Handler func(ctx context.Context, tx pgx.Tx, ev *Event) error

// ExternalHandler applies one new event whose effect is outside PostgreSQL:
// an HTTP call, a message to another system. The runtime never calls it with
// a database transaction open or a pool connection held, and it runs
// concurrently with other events' calls as the consumer's Config.Ordering allows.
//
// Guarantee: the handler is called at least once for every event id, and
// again only in the windows described in docs/consumer.md ("Processing
// model"): after a crash, a rebalance or a shutdown between a successful
// call and the short transaction that records the id. The event id is
// stable across those calls, so an effect that deduplicates on it (an HTTP
// Idempotency-Key, see IdempotencyKeyTransport) happens once. The id is
// recorded in the dedup table once.
//
// Errors are treated as a Handler's: retried (HandlerMaxAttempts), then
// dead-lettered; Permanent dead-letters at once; Unavailable pauses the
// event (without using an attempt or dead-lettering) and retries it.
//
// ctx carries the event (EventFromContext) and its trace context; it ends
// when the partition is revoked (the call is then abandoned, and the
// partition's next owner calls again with the same id) or when the shutdown
// grace period is over.
type ExternalHandler func(ctx context.Context, ev *Event) error

type eventKey struct{}

// ContextWithEvent returns ctx carrying ev. The runtime does this for every
// handler call; IdempotencyKeyTransport reads it.
func ContextWithEvent(ctx context.Context, ev *Event) context.Context {
	return context.WithValue(ctx, eventKey{}, ev)
}

// EventFromContext returns the event a handler is processing.
func EventFromContext(ctx context.Context) (*Event, bool) {
	ev, ok := ctx.Value(eventKey{}).(*Event)
	return ev, ok && ev != nil
}

// Permanent marks a handler error that retrying can't fix (a 4xx answer, a
// constraint violation on bad data): the event is dead-lettered at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Unavailable marks a handler error caused by a dependency that is down (the
// database, a downstream service that refuses connections). The runtime rolls
// back the batch, reports not ready and retries the batch with backoff; the
// event is not dead-lettered and the offset does not move.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// IsUnavailable reports whether err was marked with Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// ErrStopped is returned by Run (wrapped, with the event) when an event's
// reason has PolicyStop.
var ErrStopped = errors.New("stopped by policy")
