package event

// Dead-letter headers, added to the original record's headers. Headers of the
// original that start with DeadLetterHeaderPrefix are dropped first, so an
// event replayed from the dead-letter topic and failing again carries only
// its latest failure.
const (
	DeadLetterHeaderPrefix     = "dlq-"
	HeaderDLQReason            = "dlq-reason"             // a Reason, e.g. "not_json"
	HeaderDLQError             = "dlq-error"              // the error text, at most 1 KiB
	HeaderDLQOriginalTopic     = "dlq-original-topic"     // topic of the original record
	HeaderDLQOriginalPartition = "dlq-original-partition" // decimal
	HeaderDLQOriginalOffset    = "dlq-original-offset"    // decimal
	HeaderDLQOriginalTimestamp = "dlq-original-timestamp" // RFC 3339, the original record's timestamp
	HeaderDLQConsumerGroup     = "dlq-consumer-group"     // the group that gave up on it
	HeaderDLQEventID           = "dlq-event-id"           // the event id, when it was decoded
	HeaderDLQAttempts          = "dlq-attempts"           // handler attempts (handler_failed only)
	HeaderDLQTime              = "dlq-time"               // RFC 3339, when it was dead-lettered
	HeaderDLQValueDropped      = "dlq-value-dropped"      // "true" if the record alone exceeds the dead-letter topic's max.message.bytes
)

// Dead-letter headers the runtime adds when a record can't go to the
// dead-letter topic whole (see fitDeadLetter).
const (
	HeaderDLQValueSize            = "dlq-value-size"              // decimal: the dropped value's size in bytes
	HeaderDLQKeyAndHeadersDropped = "dlq-key-and-headers-dropped" // "true" if the key and the original's own headers were dropped too
)
