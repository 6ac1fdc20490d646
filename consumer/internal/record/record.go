package record

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-dev/operator/consumer/envelope"
	"github.com/idempotency-dev/operator/consumer/event"
)

// State is what became of an Item.
type State uint8

const (
	Pending   State = iota // the handler is to run (or ran, once Handled)
	Handled                // the handler succeeded
	Duplicate              // the id was processed before
	Rejected               // a reason applies; its policy says what happens
	// Passed is a record a dead-letter replay passes over (not selected):
	// done with no effect, the position moves past it.
	Passed
)

// Item is one record of a batch and what became of it.
type Item struct {
	Msg      kafka.Message
	Ev       event.Event
	Decoded  bool
	Trace    event.TraceContext
	HasTrace bool
	// Batch is the context of the span of the batch the record came in;
	// invalid when tracing is off (telemetry.Tracing).
	Batch    trace.SpanContext
	State    State
	Reason   event.Reason
	Policy   event.Policy
	ErrText  string
	Attempts int
	// Poison is set when the event's handler ended the batch transaction
	// itself or left a query result open on its connection: the
	// transaction is redone without calling it again, and the event takes
	// the handler_failed policy with this error text.
	Poison string
	// OwnRow is set when a handler of an earlier event ended the batch
	// transaction before this event's handler ran: had it sent COMMIT, the
	// dedup row the runtime inserted for this event is committed, without
	// the event's effect. The redo then takes that row for this event's
	// own, not for an earlier processing, and runs the handler.
	OwnRow bool
}

// Decode fills it from m: the event's fields and trace context, stamped
// with the batch span's context, or the reason it can't be decoded and
// that reason's policy.
func Decode(it *Item, m kafka.Message, batch trace.SpanContext, opts envelope.Options, policies map[event.Reason]event.Policy) {
	it.Msg = m
	headers := make([]event.Header, len(m.Headers))
	eh := make([]envelope.Header, len(m.Headers))
	for i, h := range m.Headers {
		headers[i] = event.Header{Key: h.Key, Value: h.Value}
		eh[i] = envelope.Header{Key: h.Key, Value: h.Value}
	}
	it.Ev = event.Event{Key: m.Key, Headers: headers, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	it.Trace, it.HasTrace = event.TraceFromHeaders(headers)
	it.Batch = batch
	d, err := envelope.Decode(m.Value, eh, opts)
	if err != nil {
		var de *envelope.Error
		if errors.As(err, &de) {
			it.Reason = de.Reason
		} else {
			it.Reason = event.ReasonNotJSON
		}
		it.ErrText = err.Error()
		it.State = Rejected
		it.Policy = policies[it.Reason]
		return
	}
	it.Decoded = true
	it.Ev.ID, it.Ev.Type, it.Ev.OccurredAt, it.Ev.Payload = d.ID, d.Type, d.OccurredAt, d.Payload
}

// StopError is the error Run returns for it under PolicyStop.
func (it *Item) StopError() error {
	return fmt.Errorf("%w: %s: %s partition %d offset %d: %s", event.ErrStopped, it.Reason, it.Msg.Topic, it.Msg.Partition, it.Msg.Offset, it.ErrText)
}

// InfraError marks a failure of the database (or of a dependency the handler
// declared Unavailable): the batch is rolled back and retried, never
// dead-lettered.
type InfraError struct{ Err error }

func (e *InfraError) Error() string { return e.Err.Error() }
func (e *InfraError) Unwrap() error { return e.Err }

// Infra wraps err, formatted with format, as an *InfraError.
func Infra(format string, err error) error {
	return &InfraError{fmt.Errorf(format, err)}
}

// Ptrs points at each of items.
func Ptrs(items []Item) []*Item {
	out := make([]*Item, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
