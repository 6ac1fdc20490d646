package sink

import (
	"fmt"
	"strings"

	"github.com/idempotency-dev/operator/consumer"
)

// DefaultIdempotencyKey is the default Idempotency-Key template: the bare
// event id.
const DefaultIdempotencyKey = "{eventId}"

// MaxIdempotencyKeyTemplate is the longest template accepted, in bytes.
const MaxIdempotencyKeyTemplate = 200

// IdempotencyKeyPlaceholders are the placeholders an Idempotency-Key
// template may use: {eventId} (required) is the event id, {group} the
// consumer group and {topic} the record's topic.
var IdempotencyKeyPlaceholders = []string{"{eventId}", "{group}", "{topic}"}

// IdempotencyKeyTemplate is a parsed Idempotency-Key template, such as
// "{group}:{eventId}" for two consumer groups that call one provider account
// (with per-group dedup scope, the bare ids of the two groups' events are
// the same keys to the provider). Changing the template of a live stream
// makes the redeliveries of events already sent look new to the provider.
type IdempotencyKeyTemplate struct {
	parts []string // literal text and placeholders, in order
}

// ParseIdempotencyKey checks a template: only the placeholders of
// IdempotencyKeyPlaceholders, {eventId} at least once, and otherwise
// printable ASCII other than braces (a header value), at most
// MaxIdempotencyKeyTemplate bytes. Empty means DefaultIdempotencyKey.
func ParseIdempotencyKey(tmpl string) (IdempotencyKeyTemplate, error) {
	if tmpl == "" {
		tmpl = DefaultIdempotencyKey
	}
	bad := func(format string, a ...any) (IdempotencyKeyTemplate, error) {
		return IdempotencyKeyTemplate{}, fmt.Errorf("idempotency key template %q: "+format, append([]any{tmpl}, a...)...)
	}
	if len(tmpl) > MaxIdempotencyKeyTemplate {
		return bad("longer than %d bytes", MaxIdempotencyKeyTemplate)
	}
	var t IdempotencyKeyTemplate
	hasID := false
	for rest := tmpl; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, rest)
			break
		}
		if i > 0 {
			t.parts = append(t.parts, rest[:i])
			rest = rest[i:]
		}
		end := strings.IndexByte(rest, '}')
		if rest[0] == '}' || end < 0 {
			return bad("unbalanced brace; placeholders are %s", strings.Join(IdempotencyKeyPlaceholders, ", "))
		}
		ph := rest[:end+1]
		known := false
		for _, k := range IdempotencyKeyPlaceholders {
			known = known || ph == k
		}
		if !known {
			return bad("unknown placeholder %s; the placeholders are %s", ph, strings.Join(IdempotencyKeyPlaceholders, ", "))
		}
		hasID = hasID || ph == "{eventId}"
		t.parts = append(t.parts, ph)
		rest = rest[end+1:]
	}
	for _, p := range t.parts {
		for _, c := range []byte(p) {
			if c < 0x21 || c > 0x7e {
				return bad("only printable ASCII without spaces may surround the placeholders")
			}
		}
	}
	if !hasID {
		return bad("must contain {eventId}: without it events would share keys")
	}
	return t, nil
}

// Key fills the template in for ev, read by consumer group group.
func (t IdempotencyKeyTemplate) Key(group string, ev *consumer.Event) string {
	if len(t.parts) == 1 && t.parts[0] == "{eventId}" {
		return ev.ID.String()
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p {
		case "{eventId}":
			b.WriteString(ev.ID.String())
		case "{group}":
			b.WriteString(group)
		case "{topic}":
			b.WriteString(ev.Topic)
		default:
			b.WriteString(p)
		}
	}
	return b.String()
}
