package consumer

import (
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go"
)

// Isolation says which records of transactional producers (Kafka Streams,
// Kafka Connect exactly-once sources, transactional outbox relays) the
// consumer reads.
type Isolation string

const (
	// IsolationReadCommitted (the default) reads non-transactional records
	// and those of committed transactions. Records of aborted transactions are
	// never handed to the handler, and a partition is read only up to its
	// first open transaction (the last stable offset), so a long open
	// transaction holds back the records after it.
	IsolationReadCommitted Isolation = "ReadCommitted"
	// IsolationReadUncommitted reads every data record as soon as it is
	// written, aborted transactions included.
	IsolationReadUncommitted Isolation = "ReadUncommitted"
)

// ParseIsolation accepts an isolation level in any case and in Kafka's
// spelling too ("read_committed", "read-committed", "ReadCommitted").
func ParseIsolation(s string) (Isolation, error) {
	switch strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", ""), "_", "") {
	case "readcommitted":
		return IsolationReadCommitted, nil
	case "readuncommitted":
		return IsolationReadUncommitted, nil
	}
	return "", fmt.Errorf("%q is not ReadCommitted or ReadUncommitted", s)
}

// kafkaLevel is the isolation level of the fetch requests. Control records
// (transaction markers) are never returned at either level.
func (i Isolation) kafkaLevel() kafka.IsolationLevel {
	if i == IsolationReadUncommitted {
		return kafka.ReadUncommitted
	}
	return kafka.ReadCommitted
}
