package replay

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/event"
	"github.com/idempotency-dev/operator/consumer/internal/record"
	"github.com/idempotency-dev/operator/consumer/internal/redact"
	contract "github.com/idempotency-dev/operator/consumer/replay"
)

// maxErrorHeader bounds the dlq-error header, as the live dead letters do.
const maxErrorHeader = 1024

// letter is a dead letter's headers, parsed.
type letter struct {
	reason, parkedReason event.Reason
	time                 time.Time
	hasTime              bool
	eventID              string
	origTopic            string
	origPartition        int
	origOffset           int64
	origTime             time.Time
	group                string
	attempts, replays    int
	replayID             string
	errText              string
}

func parseLetter(m kafka.Message) letter {
	var l letter
	for _, h := range m.Headers {
		v := string(h.Value)
		switch h.Key {
		case event.HeaderDLQReason:
			l.reason = event.Reason(v)
		case contract.HeaderParkedReason:
			l.parkedReason = event.Reason(v)
		case event.HeaderDLQTime:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				l.time, l.hasTime = t, true
			}
		case event.HeaderDLQEventID:
			l.eventID = v
		case event.HeaderDLQOriginalTopic:
			l.origTopic = v
		case event.HeaderDLQOriginalPartition:
			l.origPartition, _ = strconv.Atoi(v)
		case event.HeaderDLQOriginalOffset:
			l.origOffset, _ = strconv.ParseInt(v, 10, 64)
		case event.HeaderDLQOriginalTimestamp:
			l.origTime, _ = time.Parse(time.RFC3339Nano, v)
		case event.HeaderDLQConsumerGroup:
			l.group = v
		case event.HeaderDLQAttempts:
			l.attempts, _ = strconv.Atoi(v)
		case contract.HeaderReplays:
			l.replays, _ = strconv.Atoi(v)
		case contract.HeaderReplayID:
			l.replayID = v
		case event.HeaderDLQError:
			l.errText = v
		}
	}
	if !l.hasTime {
		l.time = m.Time // written without dlq-time (not by this runtime): the broker's timestamp
	}
	return l
}

// selector decides which dead letters a replay (or a listing) takes.
type selector struct {
	sel    contract.Selection
	cutoff time.Time // zero: none (a listing)
	id     string    // the replay's id: what it wrote back itself is never taken
	ids    map[string]bool
}

func newSelector(sel contract.Selection, cutoff time.Time, id string) *selector {
	s := &selector{sel: sel, cutoff: cutoff, id: id}
	if len(sel.EventIDs) > 0 {
		s.ids = make(map[string]bool, len(sel.EventIDs))
		for _, e := range sel.EventIDs {
			s.ids[strings.ToLower(e)] = true
		}
	}
	return s
}

// selects reports whether every criterion holds for the dead letter m (MaxCount
// aside: the caller counts).
func (s *selector) selects(m kafka.Message, l *letter) bool {
	if s.id != "" && l.replayID == s.id {
		return false // written back by this replay: never read again
	}
	if !s.cutoff.IsZero() && l.time.After(s.cutoff) {
		return false
	}
	if len(s.sel.Reasons) == 0 {
		if l.reason == contract.ReasonParked {
			return false
		}
	} else if !slices.Contains(s.sel.Reasons, l.reason) {
		return false
	}
	if a := s.sel.DeadLetteredAfter; a != nil && l.time.Before(*a) {
		return false
	}
	if b := s.sel.DeadLetteredBefore; b != nil && !l.time.Before(*b) {
		return false
	}
	if len(s.sel.Partitions) > 0 {
		ok := false
		for _, p := range s.sel.Partitions {
			if p.Partition == l.origPartition && (p.FromOffset == nil || *p.FromOffset <= l.origOffset) &&
				(p.ToOffset == nil || l.origOffset <= *p.ToOffset) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if s.ids != nil && !s.ids[strings.ToLower(l.eventID)] {
		return false
	}
	if k := s.sel.Key; k != nil && string(m.Key) != *k {
		return false
	}
	return true
}

// original is the record the dead letter m was made from: its value, key
// and own headers (the dlq-* ones dropped), topic, partition, offset and
// timestamp from the dlq-original-* headers.
func original(m kafka.Message, l *letter) kafka.Message {
	headers := make([]kafka.Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		if !strings.HasPrefix(h.Key, event.DeadLetterHeaderPrefix) {
			headers = append(headers, h)
		}
	}
	return kafka.Message{Topic: l.origTopic, Partition: l.origPartition, Offset: l.origOffset, Key: m.Key, Value: m.Value,
		Headers: headers, Time: l.origTime, HighWaterMark: m.HighWaterMark}
}

// parks reports whether a record that failed again now is parked.
func parks(l *letter, maxReplays int) bool { return l.replays+1 >= maxReplays }

// writeBack builds the record a replayed event that failed again goes back
// to the dead-letter topic as: the dead letter's headers (dlq-original-*,
// the group and the event id unchanged), the new failure's reason, error,
// attempts and time, dlq-replays incremented and dlq-replay-id; at the limit
// its reason is parked and dlq-parked-reason keeps the failure's.
func writeBack(it *record.Item, now time.Time, id string, maxReplays int, secrets []string) kafka.Message {
	m := it.Msg
	l := parseLetter(m)
	replaced := map[string]bool{event.HeaderDLQReason: true, event.HeaderDLQError: true, event.HeaderDLQAttempts: true,
		event.HeaderDLQTime: true, contract.HeaderReplays: true, contract.HeaderReplayID: true, contract.HeaderParkedReason: true}
	headers := make([]kafka.Header, 0, len(m.Headers)+4)
	for _, h := range m.Headers {
		if !replaced[h.Key] {
			headers = append(headers, h)
		}
	}
	errText := redact.Text(it.ErrText, secrets...)
	if len(errText) > maxErrorHeader {
		errText = errText[:maxErrorHeader]
	}
	add := func(k, v string) { headers = append(headers, kafka.Header{Key: k, Value: []byte(v)}) }
	reason := it.Reason
	if parks(&l, maxReplays) {
		add(contract.HeaderParkedReason, string(reason))
		reason = contract.ReasonParked
	}
	add(event.HeaderDLQReason, string(reason))
	add(event.HeaderDLQError, errText)
	if it.Attempts > 0 {
		add(event.HeaderDLQAttempts, strconv.Itoa(it.Attempts))
	}
	add(event.HeaderDLQTime, now.UTC().Format(time.RFC3339Nano))
	add(contract.HeaderReplays, strconv.Itoa(l.replays+1))
	add(contract.HeaderReplayID, id)
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: headers}
}

// listed is the dead letter m for inspection.
func listed(m kafka.Message, l *letter) contract.DeadLetter {
	return contract.DeadLetter{Partition: m.Partition, Offset: m.Offset, Time: l.time, Reason: l.reason, ParkedReason: l.parkedReason,
		EventID: l.eventID, Key: string(m.Key), OriginalTopic: l.origTopic, OriginalPartition: l.origPartition,
		OriginalOffset: l.origOffset, Group: l.group, Attempts: l.attempts, Replays: l.replays, ReplayID: l.replayID, Error: l.errText}
}
