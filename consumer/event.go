package consumer

import (
	"context"
	"time"

	"github.com/idempotency-dev/operator/consumer/event"
)

// The types a handler sees live in the leaf package event; these names are
// the same types (aliases) and functions, so code written against either
// package works with both.
type (
	// Event is one decoded Kafka record handed to a handler; see [event.Event].
	Event = event.Event
	// Header is one Kafka record header.
	Header = event.Header
	// Handler applies one new event in the batch's transaction; see [event.Handler].
	Handler = event.Handler
	// ExternalHandler applies one new event whose effect is outside
	// PostgreSQL; see [event.ExternalHandler].
	ExternalHandler = event.ExternalHandler
	// Reason says why an event was not handled normally; see [event.Reason].
	Reason = event.Reason
	// Policy is what the runtime does with an event that has a Reason.
	Policy = event.Policy
	// TraceContext is the W3C Trace Context of an event's record.
	TraceContext = event.TraceContext
)

// The reasons; see [event.Reason].
const (
	ReasonNotJSON          = event.ReasonNotJSON
	ReasonMissingID        = event.ReasonMissingID
	ReasonInvalidUUID      = event.ReasonInvalidUUID
	ReasonWrongUUIDVersion = event.ReasonWrongUUIDVersion
	ReasonOversized        = event.ReasonOversized
	ReasonOutsideWindow    = event.ReasonOutsideWindow
	ReasonHandlerFailed    = event.ReasonHandlerFailed
)

// The policies; see [event.Policy].
const (
	PolicyDeadLetter = event.PolicyDeadLetter
	PolicySkip       = event.PolicySkip
	PolicyStop       = event.PolicyStop
	PolicyProcess    = event.PolicyProcess
)

// The dead-letter headers; see [event.HeaderDLQReason].
const (
	DeadLetterHeaderPrefix        = event.DeadLetterHeaderPrefix
	HeaderDLQReason               = event.HeaderDLQReason
	HeaderDLQError                = event.HeaderDLQError
	HeaderDLQOriginalTopic        = event.HeaderDLQOriginalTopic
	HeaderDLQOriginalPartition    = event.HeaderDLQOriginalPartition
	HeaderDLQOriginalOffset       = event.HeaderDLQOriginalOffset
	HeaderDLQOriginalTimestamp    = event.HeaderDLQOriginalTimestamp
	HeaderDLQConsumerGroup        = event.HeaderDLQConsumerGroup
	HeaderDLQEventID              = event.HeaderDLQEventID
	HeaderDLQAttempts             = event.HeaderDLQAttempts
	HeaderDLQTime                 = event.HeaderDLQTime
	HeaderDLQValueDropped         = event.HeaderDLQValueDropped
	HeaderDLQValueSize            = event.HeaderDLQValueSize
	HeaderDLQKeyAndHeadersDropped = event.HeaderDLQKeyAndHeadersDropped
)

// Reasons lists every reason, in documentation order.
var Reasons = event.Reasons

// ErrStopped is returned by Run (wrapped, with the event) when an event's
// reason has PolicyStop.
var ErrStopped = event.ErrStopped

// ParsePolicy accepts a policy name in any case; see [event.ParsePolicy].
func ParsePolicy(s string) (Policy, error) { return event.ParsePolicy(s) }

// ContextWithEvent returns ctx carrying ev; see [event.ContextWithEvent].
func ContextWithEvent(ctx context.Context, ev *Event) context.Context {
	return event.ContextWithEvent(ctx, ev)
}

// EventFromContext returns the event a handler is processing.
func EventFromContext(ctx context.Context) (*Event, bool) { return event.EventFromContext(ctx) }

// Permanent marks a handler error that retrying can't fix; see [event.Permanent].
func Permanent(err error) error { return event.Permanent(err) }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool { return event.IsPermanent(err) }

// Unavailable marks a handler error caused by a dependency that is down;
// see [event.Unavailable].
func Unavailable(err error) error { return event.Unavailable(err) }

// IsUnavailable reports whether err was marked with Unavailable.
func IsUnavailable(err error) bool { return event.IsUnavailable(err) }

// RetryLater marks an error whose source asked to be called again later;
// see [event.RetryLater].
func RetryLater(err error, d time.Duration) error { return event.RetryLater(err, d) }

// RetryLaterAfter reports whether err was marked with RetryLater and the
// pause it asked for; see [event.RetryLaterAfter].
func RetryLaterAfter(err error) (time.Duration, bool) { return event.RetryLaterAfter(err) }

// ParseTraceparent parses a traceparent header value; see [event.ParseTraceparent].
func ParseTraceparent(s string) (TraceContext, bool) { return event.ParseTraceparent(s) }

// ContextWithTrace returns ctx carrying t.
func ContextWithTrace(ctx context.Context, t TraceContext) context.Context {
	return event.ContextWithTrace(ctx, t)
}

// TraceFromContext returns the trace context of the event being handled.
func TraceFromContext(ctx context.Context) (TraceContext, bool) { return event.TraceFromContext(ctx) }

// DefaultRetryLaterMax is the default of Config.RetryLaterMax.
const DefaultRetryLaterMax = time.Minute
