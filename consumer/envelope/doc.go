// Package envelope decodes the event envelope of a Kafka message: where the
// event id, type, time and payload are found, in the JSON envelope (an
// "eventId" field by default) or in the CloudEvents Kafka protocol binding.
//
// It is a pure function of the message bytes and a small Options value, kept
// apart from the runtime so that it can be fuzzed on its own. A message that
// can't be decoded gets an *Error carrying a Reason; the runtime turns the
// reason into a policy (dead-letter, skip or stop).
package envelope
