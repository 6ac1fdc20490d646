package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// Report is what the demo observed at the end of a run.
type Report struct {
	Workload *Workload

	LedgerRows      int   // business rows written by the SQL sink
	LedgerDistinct  int   // distinct event ids among them
	LedgerTwice     int   // ids with more than one row: must be 0
	LedgerUnknown   int   // rows for ids the demo never produced validly: must be 0
	LedgerAmount    int64 // sum of amounts
	ProcessedEvents int   // rows in the processed_event table

	DuplicatesSkipped float64        // from the consumers' metrics
	DeadLetter        map[string]int // dead-letter topic messages by reason header
	Partitions        []string       // the table's partitions, oldest first
	Window            string         // the dedup window from the object's status
	Conditions        []string       // the object's status conditions
	Table             string
	Ready             bool
	LogsChecked       int      // operator and consumer logs scanned for the database password
	SecretLeaks       []string // logs that contained it

	Replay *ReplayReport // the dead-letter round trip, after the rest was taken
	Outbox *OutboxReport // the outbox hop, after the replay
}

func buildReport(ctx context.Context, k8s client.Client, ic *unstructured.Unstructured, wl *Workload, dbURL string, brokers []string, dlq string, consumers []*localstack.Consumer) (*Report, error) {
	rep := &Report{Workload: wl, DeadLetter: map[string]int{}}

	cur := ic.DeepCopy()
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ic.GetNamespace(), Name: ic.GetName()}, cur); err != nil {
		return rep, err
	}
	rep.Ready = conditionTrue(cur, "Ready")
	for _, c := range conditions(cur) {
		rep.Conditions = append(rep.Conditions, fmt.Sprintf("%-16v %-5v %v: %v", c["type"], c["status"], c["reason"], c["message"]))
	}
	from, _, _ := unstructured.NestedString(cur.Object, "status", "window", "from")
	to, _, _ := unstructured.NestedString(cur.Object, "status", "window", "to")
	rep.Window = fmt.Sprintf("[%s, %s)", from, to)
	schema, _, _ := unstructured.NestedString(cur.Object, "spec", "database", "schema")
	table, _, _ := unstructured.NestedString(cur.Object, "spec", "database", "table")
	if schema == "" {
		schema = "public"
	}
	if table == "" {
		table = "processed_event"
	}
	rep.Table = schema + "." + table

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return rep, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT event_id, count(*), sum(amount) FROM ledger GROUP BY event_id`)
	if err != nil {
		return rep, fmt.Errorf("reading the ledger: %w", err)
	}
	for rows.Next() {
		var id [16]byte
		var n, amount int64
		if err := rows.Scan(&id, &n, &amount); err != nil {
			return rep, err
		}
		rep.LedgerRows += int(n)
		rep.LedgerDistinct++
		rep.LedgerAmount += amount
		if n > 1 {
			rep.LedgerTwice++
		}
		if _, ok := wl.AmountByID[id]; !ok {
			rep.LedgerUnknown++
		}
	}
	if err := rows.Err(); err != nil {
		return rep, err
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()).Scan(&rep.ProcessedEvents); err != nil {
		return rep, fmt.Errorf("counting %s: %w", rep.Table, err)
	}
	prow, err := conn.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY c.relname`, pgx.Identifier{schema, table}.Sanitize())
	if err != nil {
		return rep, err
	}
	for prow.Next() {
		var name, bound string
		if err := prow.Scan(&name, &bound); err != nil {
			return rep, err
		}
		rep.Partitions = append(rep.Partitions, name)
	}
	if err := prow.Err(); err != nil {
		return rep, err
	}

	for _, c := range consumers {
		v, err := scrapeCounter(ctx, "http://"+c.Addr+"/metrics", duplicatesMetric)
		if err != nil {
			return rep, fmt.Errorf("reading %s metrics: %w", c.Name, err)
		}
		rep.DuplicatesSkipped += v
	}
	if err := readDeadLetters(ctx, brokers, dlq, rep.DeadLetter); err != nil {
		return rep, err
	}
	return rep, nil
}

// scrapeCounter sums every sample of the named metric in a Prometheus text page.
func scrapeCounter(ctx context.Context, url, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	// A counter vector with no samples yet is absent from the page: zero.
	_ = found
	return sum, sc.Err()
}

// readDeadLetters counts the dead-letter topic's messages by reason header.
func readDeadLetters(ctx context.Context, brokers []string, topic string, byReason map[string]int) error {
	return localstack.ReadPartition(ctx, brokers, topic, 0, func(m kafka.Message) {
		reason := "(no reason header)"
		for _, h := range m.Headers {
			if h.Key == reasonHeader {
				reason = string(h.Value)
			}
		}
		byReason[reason]++
	})
}

// Check returns the violated invariants; none means the system did its job.
func (r *Report) Check() []string {
	var p []string
	wl := r.Workload
	if r.LedgerRows != wl.Unique {
		p = append(p, fmt.Sprintf("ledger rows %d != unique valid ids %d", r.LedgerRows, wl.Unique))
	}
	if r.LedgerTwice != 0 {
		p = append(p, fmt.Sprintf("%d ids applied more than once", r.LedgerTwice))
	}
	if r.LedgerUnknown != 0 {
		p = append(p, fmt.Sprintf("%d ledger rows for ids that were not valid in-window events", r.LedgerUnknown))
	}
	if r.LedgerAmount != wl.ExpectedAmount {
		p = append(p, fmt.Sprintf("ledger total %d != expected %d", r.LedgerAmount, wl.ExpectedAmount))
	}
	if r.ProcessedEvents != wl.Unique {
		p = append(p, fmt.Sprintf("processed_event rows %d != unique valid ids %d", r.ProcessedEvents, wl.Unique))
	}
	if int(r.DuplicatesSkipped) < wl.Duplicates {
		p = append(p, fmt.Sprintf("duplicates skipped %.0f < duplicates produced %d", r.DuplicatesSkipped, wl.Duplicates))
	}
	for reason, n := range wl.Malformed {
		if r.DeadLetter[reason] != n {
			p = append(p, fmt.Sprintf("dead-lettered %s: %d, want %d", reason, r.DeadLetter[reason], n))
		}
	}
	if want := len(wl.Rejected) + len(wl.Broken); r.DeadLetter[handlerFailedReason] != want {
		p = append(p, fmt.Sprintf("dead-lettered %s: %d, want %d (the events the ledger refused)", handlerFailedReason, r.DeadLetter[handlerFailedReason], want))
	}
	if r.DeadLetter[outsideWindowReason] != wl.OutsideWindow {
		p = append(p, fmt.Sprintf("dead-lettered %s: %d, want %d", outsideWindowReason, r.DeadLetter[outsideWindowReason], wl.OutsideWindow))
	}
	if len(r.Partitions) == 0 {
		p = append(p, "the table has no partitions")
	}
	if r.LogsChecked == 0 || len(r.SecretLeaks) > 0 {
		p = append(p, fmt.Sprintf("log hygiene: %d logs checked, the database password appears in %v", r.LogsChecked, r.SecretLeaks))
	}
	if !r.Ready {
		p = append(p, "the IdempotentConsumer is not Ready")
	}
	if r.Replay == nil {
		p = append(p, "no dead-letter replay ran")
	} else {
		p = append(p, r.Replay.Check()...)
	}
	if r.Outbox == nil {
		p = append(p, "no outbox hop ran")
	} else {
		p = append(p, r.Outbox.Check()...)
	}
	return p
}

// Print writes the report for a person.
func (r *Report) Print(w io.Writer) {
	wl := r.Workload
	if wl == nil {
		return
	}
	fmt.Fprintln(w, "")
	fmt.Fprintln(w, "==================== idempotent-consumer demo report ====================")
	fmt.Fprintf(w, "events produced            %d\n", wl.Produced)
	fmt.Fprintf(w, "  unique valid ids         %d\n", wl.Unique)
	fmt.Fprintf(w, "  duplicates               %d (of which replay of an older range: %d)\n", wl.Duplicates, wl.Replayed)
	fmt.Fprintf(w, "  malformed                %d\n", sum(wl.Malformed))
	fmt.Fprintf(w, "  outside the dedup window %d\n", wl.OutsideWindow)
	fmt.Fprintf(w, "  refused by the ledger    %d (%d until its limit is raised, %d never valid)\n", len(wl.Rejected)+len(wl.Broken), len(wl.Rejected), len(wl.Broken))
	fmt.Fprintf(w, "business rows written      %d (distinct ids %d, ids applied twice %d, total amount %d, expected %d)\n",
		r.LedgerRows, r.LedgerDistinct, r.LedgerTwice, r.LedgerAmount, wl.ExpectedAmount)
	fmt.Fprintf(w, "processed_event rows       %d\n", r.ProcessedEvents)
	fmt.Fprintf(w, "duplicates skipped         %.0f (consumer metrics; includes redeliveries after rebalances)\n", r.DuplicatesSkipped)
	fmt.Fprintf(w, "dead-lettered by reason\n")
	var reasons []string
	for k := range r.DeadLetter {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(w, "  %-24s %d\n", k, r.DeadLetter[k])
	}
	fmt.Fprintf(w, "table %s: %d partitions, window %s\n", r.Table, len(r.Partitions), r.Window)
	for _, p := range r.Partitions {
		fmt.Fprintf(w, "  %s\n", p)
	}
	fmt.Fprintf(w, "logs checked for the database password: %d, leaking: %d\n", r.LogsChecked, len(r.SecretLeaks))
	fmt.Fprintln(w, "IdempotentConsumer status conditions")
	for _, c := range r.Conditions {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if r.Replay != nil {
		r.Replay.Print(w)
	}
	if r.Outbox != nil {
		r.Outbox.Print(w)
	}
	if problems := r.Check(); len(problems) == 0 {
		fmt.Fprintf(w, "RECONCILED unique=%d rows=%d duplicates_applied=0 dlq=%d\n", wl.Unique, r.LedgerRows, sum(r.DeadLetter))
	} else {
		fmt.Fprintf(w, "NOT RECONCILED: %s\n", strings.Join(problems, "; "))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
