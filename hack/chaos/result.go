package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Result is what a run observed; Violations says what broke.
type Result struct {
	Seed              uint64
	Pooler            bool // the consumers went through PgBouncer in transaction mode
	Produced          int  // messages the producer wrote (retried batches counted once)
	ProduceRetries    int
	Kills             int
	KillsAfterCommit  int
	PostgresRestarts  int
	BrokerRestarts    int
	MaintenanceRuns   int64
	MaintenanceErrors int64
	LagZero           bool

	Messages          int // messages in the topic (a retried batch may have landed twice)
	Unique            int // distinct valid ids in the topic
	DuplicateMessages int // valid messages repeating an earlier id
	MalformedMessages int
	Applied           int // distinct ids with a ledger row
	DuplicatesApplied int // ledger rows beyond the first per id
	Lost              int // valid ids neither applied nor dead-lettered as outside the window
	OutsideWindow     int // valid ids dead-lettered as outside the window
	// Bug is the ids the ledger rejects during the run (see replay.go);
	// BugDeadLettered the valid ids of it dead-lettered (handler_failed)
	// and not applied before the replay phase.
	Bug             bug
	BugDeadLettered int
	// Replay is the replay phase's (nil: it did not run).
	Replay *ReplayResult
	// Outbox is the outbox chain's (nil: it did not run).
	Outbox            *OutboxResult
	UnknownApplied    int // ledger rows for ids never produced validly
	WrongAmount       int
	DLQ               int
	DLQByReason       map[string]int
	MalformedMissing  int // malformed messages absent from the dead-letter topic
	MalformedWrong    int // ... or present with another reason
	OffsetViolations  []string
	Snapshots         int
	PartitionProblems []string
	LogsChecked       int      // consumer and broker log files scanned for the database password
	SecretLeaks       []string // log files that contained it

	TxnCommitted, TxnAborted, TxnUnknown int // transactions of the transactional producer, by outcome
	AbortedMessages                      int // records of aborted transactions in the topic
	// AbortedApplied counts what the runtime did with records of aborted
	// transactions: ledger rows for their ids and dead letters of them.
	AbortedApplied int
	// UncertainUnapplied counts ids of transactions with an unknown outcome
	// that were not applied: they may have been aborted.
	UncertainUnapplied int
	// ForeignDeadLetters are dead letters for offsets that hold no data
	// record: a transaction marker handed out as a message would be one.
	ForeignDeadLetters int

	// The HTTP group (external handler) and its provider.
	HTTPConsumers    int
	HTTPKills        int
	ProviderRequests int // requests the provider answered or dropped
	ProviderDrops    int // requests applied and then dropped without an answer
	ProviderNoKey    int // requests without an Idempotency-Key
	ProviderIDs      int // distinct keys the provider saw
	// ProviderMissing counts valid ids that never reached the provider,
	// leaving out ids the HTTP group dead-lettered and ids of transactions
	// with an unknown outcome.
	ProviderMissing          int
	ProviderRequestsPerIDMax int
	ProviderRepeated         int // ids the provider saw more than once
	ProviderAborted          int // ids of aborted transactions the provider saw or the HTTP group recorded
	ProviderUnknown          int // keys the provider saw that are no valid id in the topic
	ProviderSlow             int // requests that took longer than the consumers' timeout
	ProviderBusy             int // 409 answers: the key was still in progress
	ProviderLimited          int // 429 answers with Retry-After
	// DeadLetteredRetryable counts the HTTP group's dead letters whose
	// error is a retryable answer (408, 409, 425, 429, 5xx): must be 0.
	DeadLetteredRetryable int
	HTTPDLQ               int
	HTTPDLQByReason       map[string]int
	HTTPRecorded          int // distinct ids with a dedup row of the HTTP group
	HTTPDedupRowsPerIDMax int
	HTTPRecordedNotCalled int // dedup rows for ids the provider never saw
	HTTPUnrecorded        int // valid ids neither recorded nor dead-lettered by the HTTP group
	HTTPMalformedMissing  int // malformed messages absent from the HTTP group's dead-letter topic
	HTTPSnapshots         int
	HTTPOffsetViolations  []string // the HTTP group's offsets committed ahead of its dedup rows or dead letters
	// HTTPOffsetAheadOfOwner is the strict check: it also counts offsets
	// committed past a cross-partition duplicate before the dedup row of its
	// id committed (reported, not failed: see verifyHTTP).
	HTTPOffsetAheadOfOwner []string

	// The claim clients' group (hack/chaos/claimclient): the claim function
	// called as docs/any-language.md says, by a client of its own. All but
	// the kills are computed from claim_ledger, the dedup table and the topic.
	ClaimClients           int
	ClaimKills             int
	ClaimKillsAfterCommit  int // kills between a database commit and its offset commit
	ClaimApplied           int // distinct valid ids with a claim_ledger row
	ClaimDuplicatesApplied int // claim_ledger rows beyond the first per id
	ClaimLost              int // valid ids (not of a transaction with an unknown outcome) without a row
	ClaimAbortedApplied    int // claim_ledger rows for ids of aborted transactions
	ClaimUnknownApplied    int // claim_ledger rows for ids never produced validly
	ClaimWrongAmount       int
	// ClaimedNotApplied counts the group's dedup rows without a ledger row,
	// ClaimAppliedNotClaimed ledger rows without the group's dedup row: a
	// claim and its effect that did not commit together.
	ClaimedNotApplied      int
	ClaimAppliedNotClaimed int
	ClaimSnapshots         int
	ClaimOffsetViolations  []string // the group's offsets committed ahead of its ledger rows

	// The longest transaction a consumer held open, from pg_stat_activity
	// samples every 20 ms: overall, of the SQL and of the HTTP fleet.
	TxSampled                              bool
	MaxTxOpen, MaxTxOpenSQL, MaxTxOpenHTTP time.Duration

	// Kept from verify for verifyHTTP.
	validIDs, abortedIDs map[uuid.UUID]bool
	positions            map[position]message
	byPartition          [][]message
}

// invariant is one checked promise: failed says it broke, msg how.
type invariant struct {
	failed bool
	msg    string
}

// broken lists the messages of the failed invariants, in order.
func broken(invs ...invariant) []string {
	var out []string
	for _, i := range invs {
		if i.failed {
			out = append(out, i.msg)
		}
	}
	return out
}

// Violations lists every broken invariant.
func (r *Result) Violations() []string {
	v := broken(
		invariant{!r.LagZero, "consumer lag did not reach zero"},
		invariant{r.Messages == 0 || r.Unique == 0, "nothing was produced or read back"},
		invariant{r.DuplicatesApplied != 0, fmt.Sprintf("%d duplicate applications", r.DuplicatesApplied)},
		invariant{r.Lost != 0, fmt.Sprintf("%d valid ids lost", r.Lost)},
		invariant{r.OutsideWindow != 0, fmt.Sprintf("%d valid ids fell outside the dedup window (retention too short for this run)", r.OutsideWindow)},
		invariant{r.AbortedApplied != 0, fmt.Sprintf("%d records of aborted transactions applied or dead-lettered", r.AbortedApplied)},
		invariant{r.ForeignDeadLetters != 0, fmt.Sprintf("%d dead letters for offsets that hold no data record (transaction markers?)", r.ForeignDeadLetters)},
		invariant{r.UnknownApplied != 0, fmt.Sprintf("%d ledger rows for ids never produced", r.UnknownApplied)},
		invariant{r.WrongAmount != 0, fmt.Sprintf("%d ledger rows with a wrong amount", r.WrongAmount)},
		invariant{r.MalformedMissing != 0 || r.MalformedWrong != 0,
			fmt.Sprintf("malformed messages: %d missing from the dead-letter topic, %d with the wrong reason", r.MalformedMissing, r.MalformedWrong)},
		invariant{r.Applied+r.Lost+r.OutsideWindow+r.UncertainUnapplied+r.BugDeadLettered != r.Unique,
			fmt.Sprintf("accounting: applied %d + lost %d + outside %d + uncertain %d + dead-lettered for the bug %d != unique %d",
				r.Applied, r.Lost, r.OutsideWindow, r.UncertainUnapplied, r.BugDeadLettered, r.Unique)},
		invariant{r.Snapshots == 0, "no committed-offset snapshot was taken"},
		invariant{r.LogsChecked == 0, "no log file was checked for secrets"},
		invariant{len(r.SecretLeaks) > 0, "the database password appears in logs: " + strings.Join(r.SecretLeaks, ", ")},
		invariant{!r.TxSampled, "no pg_stat_activity sample was taken: max_tx_open_ms unknown"},
	)
	if r.HTTPConsumers > 0 {
		v = append(v, r.httpViolations()...)
	}
	if r.ClaimClients > 0 {
		v = append(v, r.claimViolations()...)
	}
	v = append(v, r.OffsetViolations...)
	v = append(v, r.PartitionProblems...)
	if r.Replay != nil {
		v = append(v, r.Replay.Violations()...)
	}
	if r.Outbox != nil {
		v = append(v, r.Outbox.Violations()...)
	}
	return v
}

// httpViolations lists the broken invariants of the HTTP group: every id that
// should take effect reached the provider, every request carried its key, no
// id of an aborted transaction was called or recorded, and every id was
// recorded once (or dead-lettered), and only after it was called.
func (r *Result) httpViolations() []string {
	v := broken(
		invariant{r.ProviderRequests == 0 || r.HTTPRecorded == 0,
			fmt.Sprintf("the provider got %d requests and %d ids were recorded: nothing to check", r.ProviderRequests, r.HTTPRecorded)},
		invariant{r.ProviderMissing != 0, fmt.Sprintf("%d ids never reached the provider", r.ProviderMissing)},
		invariant{r.DeadLetteredRetryable != 0, fmt.Sprintf("%d events dead-lettered after a retryable answer (408, 409, 425, 429, 5xx)", r.DeadLetteredRetryable)},
		invariant{r.HTTPDedupRowsPerIDMax > 1, fmt.Sprintf("an id has %d dedup rows", r.HTTPDedupRowsPerIDMax)},
		invariant{r.ProviderNoKey != 0, fmt.Sprintf("%d requests without an Idempotency-Key", r.ProviderNoKey)},
		invariant{r.ProviderAborted != 0, fmt.Sprintf("%d ids of aborted transactions called or recorded", r.ProviderAborted)},
		invariant{r.ProviderUnknown != 0, fmt.Sprintf("the provider got %d keys that are no valid event id", r.ProviderUnknown)},
		invariant{r.HTTPRecordedNotCalled != 0, fmt.Sprintf("%d ids recorded without a call", r.HTTPRecordedNotCalled)},
		invariant{r.HTTPUnrecorded != 0, fmt.Sprintf("%d valid ids neither recorded nor dead-lettered at lag zero", r.HTTPUnrecorded)},
		invariant{r.HTTPMalformedMissing != 0, fmt.Sprintf("%d malformed messages missing from its dead-letter topic", r.HTTPMalformedMissing)},
		invariant{r.HTTPSnapshots == 0, "no committed-offset snapshot was taken"},
	)
	v = append(v, r.HTTPOffsetViolations...)
	for i := range v {
		v[i] = "HTTP group: " + v[i]
	}
	return v
}

// claimViolations lists the broken invariants of the claim clients' group:
// every valid id applied once (one ledger row), committed with its claim,
// nothing of an aborted transaction, and no offset committed ahead of the
// ledger.
func (r *Result) claimViolations() []string {
	v := broken(
		invariant{r.ClaimApplied == 0, "no id was applied: nothing to check"},
		invariant{r.ClaimDuplicatesApplied != 0, fmt.Sprintf("%d duplicate applications", r.ClaimDuplicatesApplied)},
		invariant{r.ClaimLost != 0, fmt.Sprintf("%d valid ids lost", r.ClaimLost)},
		invariant{r.ClaimAbortedApplied != 0, fmt.Sprintf("%d ledger rows for records of aborted transactions", r.ClaimAbortedApplied)},
		invariant{r.ClaimUnknownApplied != 0, fmt.Sprintf("%d ledger rows for ids never produced", r.ClaimUnknownApplied)},
		invariant{r.ClaimWrongAmount != 0, fmt.Sprintf("%d ledger rows with a wrong amount", r.ClaimWrongAmount)},
		invariant{r.ClaimedNotApplied != 0, fmt.Sprintf("%d ids claimed without their ledger row", r.ClaimedNotApplied)},
		invariant{r.ClaimAppliedNotClaimed != 0, fmt.Sprintf("%d ids applied without their claim", r.ClaimAppliedNotClaimed)},
		invariant{r.ClaimSnapshots == 0, "no committed-offset snapshot was taken"},
	)
	v = append(v, r.ClaimOffsetViolations...)
	for i := range v {
		v[i] = "claim group: " + v[i]
	}
	return v
}

// Print writes the findings and the RESULT line.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "chaos: seed %d\n", r.Seed)
	fmt.Fprintf(w, "chaos: produced %d messages (%d write retries); topic holds %d: %d unique valid ids, %d duplicates, %d malformed\n",
		r.Produced, r.ProduceRetries, r.Messages, r.Unique, r.DuplicateMessages, r.MalformedMessages)
	fmt.Fprintf(w, "chaos: chaos done: %d kill -9s (%d right after a database commit), %d PostgreSQL restarts, %d broker restarts; %d maintenance runs (%d failed, retried)\n",
		r.Kills, r.KillsAfterCommit, r.PostgresRestarts, r.BrokerRestarts, r.MaintenanceRuns, r.MaintenanceErrors)
	fmt.Fprintf(w, "chaos: dead-lettered %d (%s); %d committed-offset snapshots checked; %d log files checked for the database password, %d leaked it\n",
		r.DLQ, reasonList(r.DLQByReason), r.Snapshots, r.LogsChecked, len(r.SecretLeaks))
	fmt.Fprintf(w, "chaos: transactional producer: %d transactions committed, %d aborted, %d with an unknown outcome (%d of their ids not applied); %d records of aborted transactions in the topic\n",
		r.TxnCommitted, r.TxnAborted, r.TxnUnknown, r.UncertainUnapplied, r.AbortedMessages)
	fmt.Fprintf(w, "chaos: longest consumer transaction open: %d ms (SQL sink %d ms, HTTP sink %d ms)\n",
		r.MaxTxOpen.Milliseconds(), r.MaxTxOpenSQL.Milliseconds(), r.MaxTxOpenHTTP.Milliseconds())
	var httpPart string
	if r.HTTPConsumers > 0 {
		fmt.Fprintf(w, "chaos: HTTP group: %d kill -9s; provider got %d requests (%d applied then dropped, %d without a key) for %d ids, %d of them more than once; %d ids recorded; dead-lettered %d (%s); %d recorded but never called, %d neither recorded nor dead-lettered, %d aborted, %d unknown\n",
			r.HTTPKills, r.ProviderRequests, r.ProviderDrops, r.ProviderNoKey, r.ProviderIDs, r.ProviderRepeated, r.HTTPRecorded,
			r.HTTPDLQ, reasonList(r.HTTPDLQByReason), r.HTTPRecordedNotCalled, r.HTTPUnrecorded, r.ProviderAborted, r.ProviderUnknown)
		fmt.Fprintf(w, "chaos: HTTP group: provider took %d requests past the timeout, answered 409 (key in progress) %d times and 429 with Retry-After %d times; %d events dead-lettered after a retryable answer\n",
			r.ProviderSlow, r.ProviderBusy, r.ProviderLimited, r.DeadLetteredRetryable)
		fmt.Fprintf(w, "chaos: HTTP group: %d committed-offset snapshots checked against its dedup rows and dead letters; %d malformed messages missing from its dead-letter topic\n",
			r.HTTPSnapshots, r.HTTPMalformedMissing)
		for _, s := range r.HTTPOffsetAheadOfOwner {
			fmt.Fprintf(w, "chaos: HTTP group (strict, reported): %s\n", s)
		}
		httpPart = fmt.Sprintf(" http_kills=%d provider_missing=%d provider_requests_per_id_max=%d http_dedup_rows_per_id_max=%d http_offset_violations=%d http_offset_ahead_of_owner_record=%d provider_busy_409=%d provider_429=%d dead_lettered_retryable=%d",
			r.HTTPKills, r.ProviderMissing, r.ProviderRequestsPerIDMax, r.HTTPDedupRowsPerIDMax, len(r.HTTPOffsetViolations), len(r.HTTPOffsetAheadOfOwner),
			r.ProviderBusy, r.ProviderLimited, r.DeadLetteredRetryable)
	}
	var claimPart string
	if r.ClaimClients > 0 {
		fmt.Fprintf(w, "chaos: claim group: %d kill -9s (%d between a database commit and its offset commit); %d ids applied, %d ledger rows more than one per id, %d lost; %d claimed without a ledger row, %d applied without a claim; %d aborted, %d unknown, %d wrong amounts; %d committed-offset snapshots checked\n",
			r.ClaimKills, r.ClaimKillsAfterCommit, r.ClaimApplied, r.ClaimDuplicatesApplied, r.ClaimLost, r.ClaimedNotApplied, r.ClaimAppliedNotClaimed,
			r.ClaimAbortedApplied, r.ClaimUnknownApplied, r.ClaimWrongAmount, r.ClaimSnapshots)
		claimPart = fmt.Sprintf(" claim_kills=%d claim_kills_after_commit=%d claim_applied=%d claim_lost=%d claim_duplicates_applied=%d claim_offset_violations=%d",
			r.ClaimKills, r.ClaimKillsAfterCommit, r.ClaimApplied, r.ClaimLost, r.ClaimDuplicatesApplied, len(r.ClaimOffsetViolations))
	}
	pooler := "none"
	if r.Pooler {
		pooler = "pgbouncer-transaction"
	}
	fmt.Fprintf(w, "RESULT pooler=%s events=%d unique=%d applied=%d duplicates_applied=%d lost=%d aborted=%d aborted_applied=%d kills=%d dlq=%d pg_restarts=%d broker_restarts=%d offset_violations=%d%s%s max_tx_open_ms=%d seed=%d\n",
		pooler, r.Messages, r.Unique, r.Applied, r.DuplicatesApplied, r.Lost, r.AbortedMessages, r.AbortedApplied, r.Kills, r.DLQ, r.PostgresRestarts, r.BrokerRestarts, len(r.OffsetViolations),
		httpPart, claimPart, r.MaxTxOpen.Milliseconds(), r.Seed)
	if r.Replay != nil {
		r.Replay.Print(w)
	}
	if r.Outbox != nil {
		r.Outbox.Print(w)
	}
}

// reasonList renders dead-letter counts as "reason=n ..." in reason order.
func reasonList(byReason map[string]int) string {
	var reasons []string
	for k, n := range byReason {
		reasons = append(reasons, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(reasons)
	return strings.Join(reasons, " ")
}
