package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// Defaults of Config.
const (
	DefaultBatchSize       = 2000
	DefaultMaxMessageBytes = 1 << 20 // the broker's default message.max.bytes is 1 MiB and a little
	DefaultPollInterval    = time.Second
	DefaultPublishTimeout  = 5 * time.Second
	DefaultBackoff         = 100 * time.Millisecond
	DefaultMaxBackoff      = 30 * time.Second
	DefaultMetricsInterval = 5 * time.Second

	// backlogCountLimit bounds the rows the backlog gauge counts.
	backlogCountLimit = 1000000
	// minScanTimeout is the least deadline of the statements whose work
	// grows with the backlog (opening a window, counting the backlog).
	minScanTimeout = 10 * time.Minute
)

// Config configures a Relay.
type Config struct {
	// Table is the outbox; Ensure must have made it.
	Table Table
	// ConnConfig is the relay's own database session: it holds the
	// ownership lock, LISTENs, reads and writes the cursor. Required.
	ConnConfig *pgx.ConnConfig
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Transport, if set, is the kafka-go transport (TLS, SASL).
	Transport kafka.RoundTripper
	// BatchSize bounds the rows of one window page and of one publish call
	// (default 2000).
	BatchSize int
	// MaxMessageBytes is the largest record the relay sends and bounds
	// the bytes of one call (default 1 MiB); keep it at or below the
	// broker's message.max.bytes.
	MaxMessageBytes int
	// BatchBytes bounds the bytes read into one page (default
	// MaxMessageBytes/2), so that a partition's share of a call is one
	// record batch within the broker's limit.
	BatchBytes int
	// PollInterval is how often the relay looks for rows when no
	// notification came (default 1s), and how often a standby tries the
	// ownership lock.
	PollInterval time.Duration
	// PublishTimeout bounds one publish call (default 5s).
	PublishTimeout time.Duration
	// TakeoverDelay is how long a new owner waits after it took the lock
	// before it publishes (default 2*PublishTimeout+BatchTimeout margin):
	// longer than a former owner's last publish can still run (fencing,
	// docs/design.md).
	TakeoverDelay time.Duration
	// StallTimeout: an owner that has rows to publish and has not had a
	// publish acknowledged for this long, the broker failing it (timeouts,
	// refused connections, no leader: reason broker), is stalled: Health
	// reports it, and the relay's /healthz fails so that it is restarted and
	// a standby takes over (default 6*PublishTimeout). A row the broker
	// refuses for what it is (message_too_large, unknown_topic) stalls
	// every replica alike and does not count: a restart would not help.
	StallTimeout time.Duration
	// Backoff and MaxBackoff bound the pause after a failed publish or
	// database session (default 100ms doubling to 30s, with jitter).
	Backoff, MaxBackoff time.Duration
	// MetricsInterval is how often the owner reads the backlog and the
	// oldest unpublished age (default 5s).
	MetricsInterval time.Duration
	// Metrics, if set, are updated (NewMetrics).
	Metrics *Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
	// OnPublish, if set, is called after each acknowledged publish with
	// its start and end and the number of records (tests, tracing).
	OnPublish func(start, end time.Time, records int)
}

func (c Config) withDefaults() Config {
	c.Table = c.Table.WithDefaults()
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = c.MaxMessageBytes / 2
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.TakeoverDelay <= 0 {
		c.TakeoverDelay = 2*c.PublishTimeout + 100*time.Millisecond
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 6 * c.PublishTimeout
	}
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff < c.Backoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.Backoff)
	}
	if c.MetricsInterval <= 0 {
		c.MetricsInterval = DefaultMetricsInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics, _ = NewMetrics(nil)
	}
	return c
}

// Validate checks the configuration (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := c.Table.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ConnConfig == nil {
		errs = append(errs, errors.New("a database connection configuration is required"))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("at least one broker is required"))
	}
	if c.BatchBytes > c.MaxMessageBytes {
		errs = append(errs, fmt.Errorf("batch bytes %d exceed max message bytes %d", c.BatchBytes, c.MaxMessageBytes))
	}
	if c.TakeoverDelay < 2*c.PublishTimeout {
		errs = append(errs, fmt.Errorf("takeover delay %s is shorter than twice the publish timeout %s: a former owner's last publish (a timed-out call still queued in the writer, then its retry) could overlap the new owner's", c.TakeoverDelay, c.PublishTimeout))
	}
	if c.StallTimeout < 2*c.PublishTimeout {
		errs = append(errs, fmt.Errorf("stall timeout %s is shorter than twice the publish timeout %s: an owner would be reported stalled by one slow publish", c.StallTimeout, c.PublishTimeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid outbox relay configuration: %w", errors.Join(errs...))
	}
	return nil
}

// Relay publishes an outbox's committed rows to Kafka. Run it in several
// replicas: exactly one owns the stream at a time.
type Relay struct {
	cfg    Config
	tbl    Table
	writer *kafka.Writer
	log    *slog.Logger
	source string // the records' ce_source: /outbox/<schema>.<table>

	lockKey int64
	window  *windowBounds
	// ahead: the rows read ahead of the page at cursor aheadFor were too
	// many for one batch, and those up to aheadAfter (in event_id order)
	// were handed over; the next read of that page goes on after it.
	aheadFor   *cursor
	aheadAfter uuid.UUID
	// ackedAheadFor, ackedAheadAfter: the same, as of the last
	// acknowledged batch (a retry starts there, not at the page's first
	// rows ahead).
	ackedAheadFor   *cursor
	ackedAheadAfter uuid.UUID
	// sentOK is when the last statement of the lock-holding session that
	// succeeded was sent: the session held the lock then (fencing).
	sentOK      time.Time
	lastMetrics time.Time

	health sync.Mutex // Health reads what the relay's goroutine writes
	owning bool
	// progressAt: the last acknowledged publish, or when the owner last
	// had nothing to publish, or took the lock; failing: the reason of the
	// publish failures since (empty: none).
	progressAt time.Time
	failing    string
}

// progress records that the owner is up to date or moved (a publish was
// acknowledged, or there was nothing to publish).
func (r *Relay) progress(owning bool, failing string) {
	r.health.Lock()
	defer r.health.Unlock()
	if failing == "" || owning != r.owning {
		r.progressAt = time.Now()
	}
	r.owning, r.failing = owning, failing
}

// StallError is Health's answer for a stalled owner.
type StallError struct {
	Reason string        // the publish failures' reason (ReasonBroker)
	Since  time.Duration // since the last progress
}

func (e *StallError) Error() string {
	return fmt.Sprintf("the outbox relay owns the stream and has not published for %s (publish failures: %s): give the stream to another replica", e.Since.Round(time.Millisecond), e.Reason)
}

// Health reports a stalled owner (Config.StallTimeout) with a
// *StallError; nil for a standby, an owner that publishes or has nothing
// to publish, and an owner held by a row the broker refuses for what it is
// (every replica would be).
func (r *Relay) Health() error {
	r.health.Lock()
	defer r.health.Unlock()
	if !r.owning || r.failing != ReasonBroker {
		return nil
	}
	if d := time.Since(r.progressAt); d >= r.cfg.StallTimeout {
		return &StallError{Reason: r.failing, Since: d}
	}
	return nil
}

// NewRelay validates cfg and returns a relay; nothing is connected yet.
func NewRelay(cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Relay{cfg: cfg, tbl: cfg.Table, writer: newWriter(cfg), log: cfg.Logger.With("outbox", cfg.Table.String()),
		source: "/outbox/" + cfg.Table.String()}, nil
}

// Run runs the relay until ctx ends: it waits for the ownership lock,
// publishes while it holds it, and after a lost session starts over (as a
// standby, or as the owner again). It returns nil when ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	defer func() { _ = r.writer.Close() }()
	for attempt := 0; ; attempt++ {
		owned, err := r.session(ctx)
		// The backlog is the owner's to count: a standby reporting the
		// figures of its former ownership would mislead the alerts.
		r.cfg.Metrics.Owner.Set(0)
		r.cfg.Metrics.Backlog.Set(0)
		r.cfg.Metrics.OldestAge.Set(0)
		r.progress(false, "")
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("outbox relay session ended; starting over", "err", err, "owned", owned)
		if owned {
			// A standby polls the lock every PollInterval: let it take
			// over from an owner whose session failed, rather than race it.
			attempt = 0
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(2 * r.cfg.PollInterval):
			}
		}
		if err := r.sleep(ctx, attempt); err != nil {
			return nil
		}
	}
}

// session is one database session: connect, wait for the lock, own the
// stream until the session fails. owned reports whether it got the lock.
func (r *Relay) session(ctx context.Context) (owned bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, r.cfg.ConnConfig)
	if err != nil {
		r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
		return false, fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	// The server drops a session whose client went silent (a host gone, a
	// network black hole) within about 25 s, and with it the ownership
	// lock, rather than after the kernel's default of hours; the settings
	// are the session's own and apply to TCP connections only.
	if _, err := conn.Exec(ctx, `SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3`); err != nil {
		r.log.Warn("outbox relay: could not set the session's TCP keepalives", "err", err)
	}
	// The server ends a statement of this session that runs past the
	// longest deadline the relay gives one (scanTimeout), and (PostgreSQL
	// 14 and later) checks every 10 s during a long one that the relay is
	// still there: a relay that is gone does not keep the lock for the
	// length of a large window's scan.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`SET statement_timeout = %d`, r.scanTimeout().Milliseconds())); err != nil {
		r.log.Warn("outbox relay: could not set the session's statement_timeout", "err", err)
	}
	if _, err := conn.Exec(ctx, `SET client_connection_check_interval = '10s'`); err != nil {
		r.log.Debug("outbox relay: client_connection_check_interval not set (PostgreSQL before 14?)", "err", err)
	}
	if err := conn.QueryRow(ctx, `SELECT lock_key FROM `+r.tbl.cursorIdent()).Scan(&r.lockKey); err != nil {
		r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
		return false, fmt.Errorf("reading the ownership lock key: %w", err)
	}
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, r.lockKey).Scan(&got); err != nil {
			return false, fmt.Errorf("trying the ownership lock: %w", err)
		}
		if got {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(r.cfg.PollInterval):
		}
	}
	cur, err := r.checkCursor(ctx, conn)
	if err != nil {
		r.cfg.Metrics.Failures.WithLabelValues(ReasonCursorAhead).Inc()
		return true, err
	}
	// Fencing: a former owner whose session just died may still have one
	// publish under way, bounded by PublishTimeout from its last statement
	// on that session; wait it out before publishing anything.
	r.log.Info("outbox relay owns the stream; waiting the takeover delay", "delay", r.cfg.TakeoverDelay)
	r.cfg.Metrics.Owner.Set(1)
	r.progress(true, "")
	select {
	case <-ctx.Done():
		return true, ctx.Err()
	case <-time.After(r.cfg.TakeoverDelay):
	}
	// The session writes nothing but the cursor: its commits need not wait
	// for the WAL flush. A cursor update lost in a crash of PostgreSQL
	// (the last few hundred milliseconds of them) leaves an older cursor,
	// whose rows are published again: duplicates, never a skipped row.
	// enable_sort off: a page is the next rows of the window in event_id
	// order, which the primary key gives without a sort; with the tx range
	// estimated small (no statistics yet, or a generic plan) the planner
	// took the window's rows through the tx index and sorted them all for
	// every page (20-40 ms a page of 2,000 rows of a 20,000-row window
	// instead of 2-5 ms). No other statement of this session can do
	// without a sort it needs. jit off: the relay's statements are short,
	// and a plan's cost inflated by a disabled sort (or the backlog count's
	// estimate) had them compiled first, for 0.1 to 2 s each.
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{r.tbl.Channel()}.Sanitize()+`; SET synchronous_commit = off; SET enable_sort = off; SET jit = off`); err != nil {
		return true, fmt.Errorf("listening on %s: %w", r.tbl.Channel(), err)
	}
	r.window, r.aheadFor, r.ackedAheadFor = nil, nil, nil
	return true, r.own(ctx, conn, cur)
}

// own publishes while the session holds the lock, in a pipeline of depth
// two on the one connection: while the broker has a batch, the next one is
// read; the cursor is written once the batch is acknowledged, and only then
// does the next batch go out. So every publish starts right after a
// statement of the lock-holding session succeeded (the fencing bound of the
// takeover delay), calls never overlap (per-key order), and the stored
// cursor never passes a row the broker has not acknowledged.
func (r *Relay) own(ctx context.Context, conn *pgx.Conn, cur cursor) error {
	var (
		next     *batch // read, not yet published
		failures int
	)
	for {
		if next == nil {
			b, err := r.readBatchWithin(ctx, conn, cur)
			if err != nil {
				r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
				return err // the session (and with it the lock) is given up
			}
			if !b.moved {
				r.progress(true, "") // nothing to publish
				if err := r.idle(ctx, conn); err != nil {
					return err
				}
				continue
			}
			next = &b
		}
		// Fencing: a publish starts within TakeoverDelay - PublishTimeout
		// of the send of a statement of this session that succeeded, so it
		// ends before a new owner (which took the lock after that
		// statement) publishes. After a long statement (opening a large
		// window, counting the backlog) or an idle wait, ask again first.
		if time.Since(r.sentOK) > r.fenceAge() {
			sent := time.Now()
			pctx, cancel := context.WithTimeout(ctx, r.fenceAge())
			_, err := conn.Exec(pctx, `SELECT 1`)
			cancel()
			if err != nil {
				r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
				return fmt.Errorf("checking the session before a publish: %w", err)
			}
			r.sentOK = sent
		}
		// Publish next; meanwhile read the batch after it.
		start := time.Now()
		done := make(chan error, 1)
		go func(rows []row) { done <- r.publish(ctx, rows) }(next.rows)
		after, rerr := r.readBatchWithin(ctx, conn, next.next)
		perr := <-done
		end := time.Now()
		var pe *PublishError
		switch {
		case errors.As(perr, &pe):
			r.cfg.Metrics.Failures.WithLabelValues(pe.Reason).Inc()
			r.progress(true, pe.Reason)
			r.log.Error("outbox relay could not publish; keeping its place and retrying", "reason", pe.Reason, "topic", pe.Topic, "err", pe.Err, "attempt", failures+1)
			next, r.window = nil, nil // read the batch and its window's bounds again with the retry
			r.aheadFor, r.aheadAfter = r.ackedAheadFor, r.ackedAheadAfter
			if rerr != nil {
				r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
				return rerr
			}
			// The backlog and the oldest unpublished age go on being read
			// while the relay is stuck: they are what the alert watches.
			if time.Since(r.lastMetrics) >= r.cfg.MetricsInterval {
				if err := r.readMetrics(ctx, conn); err != nil {
					r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
					return err
				}
			}
			if err := r.sleep(ctx, failures); err != nil {
				return err
			}
			failures++
			continue
		case perr != nil:
			return perr
		case rerr != nil:
			r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
			return rerr
		}
		failures = 0
		r.progress(true, "")
		if next.aheadEnd != nil {
			held := next.next
			r.ackedAheadFor, r.ackedAheadAfter = &held, *next.aheadEnd
		} else {
			r.ackedAheadFor = nil
		}
		if len(next.rows) > 0 {
			r.cfg.Metrics.Published.Add(float64(len(next.rows)))
			for _, o := range next.rows {
				if !o.ahead {
					r.cfg.Metrics.PublishLatency.Observe(end.Sub(o.createdAt).Seconds())
				}
			}
			if r.cfg.OnPublish != nil {
				r.cfg.OnPublish(start, end, len(next.rows))
			}
		}
		// A batch without rows (a window opened, or an empty one closed)
		// moves the cursor in memory only: the ids it passes hold no
		// outbox row, so a stored cursor behind it costs a re-read of
		// empty windows at most. Written, the cursor's own transaction id
		// opened the next (empty) window, whose write opened the next.
		if len(next.rows) > 0 {
			sctx, cancel := context.WithTimeout(ctx, r.cfg.StallTimeout)
			sent := time.Now()
			err := r.writeCursor(sctx, conn, next.next)
			cancel()
			if err == nil {
				r.sentOK = sent
			}
			if err != nil {
				r.cfg.Metrics.Failures.WithLabelValues(ReasonDatabase).Inc()
				return err
			}
		}
		cur = next.next
		next = nil
		if after.moved {
			next = &after
		}
		if time.Since(r.lastMetrics) >= r.cfg.MetricsInterval {
			if err := r.readMetrics(ctx, conn); err != nil {
				return err
			}
		}
	}
}

// readBatchWithin is readBatch with deadlines: a database that does not
// answer (a network black hole) ends the session, and the relay starts
// over, rather than wait for the kernel to give up on the connection. Every
// statement of the owner has one: StallTimeout, or scanTimeout for opening
// a window (readBatch).
func (r *Relay) readBatchWithin(ctx context.Context, conn *pgx.Conn, c cursor) (batch, error) {
	b, err := r.readBatch(ctx, conn, c)
	if err == nil && !b.lastSent.IsZero() {
		r.sentOK = b.lastSent
	}
	return b, err
}

// fenceAge is how long after the send of its last successful statement the
// owner may still start a publish: the takeover delay less one publish,
// with a margin of a tenth.
func (r *Relay) fenceAge() time.Duration {
	return max((r.cfg.TakeoverDelay-r.cfg.PublishTimeout)*9/10, 0)
}

// scanTimeout is the deadline of the statements whose work grows with the
// backlog: opening a window reads every event_id of it (after an outage,
// the whole backlog: about 0.4 s a million rows), and the backlog count
// reads up to backlogCountLimit rows. With the deadline of the other
// statements, a backlog of some millions (75 million with the defaults, one
// with a publish timeout of 100 ms) ended every owner's session there, for
// ever. Nothing is published while they run, so a longer wait does not
// bear on the fencing; a database gone silent meanwhile still drops the
// session (and its lock) through its TCP keepalives.
func (r *Relay) scanTimeout() time.Duration { return max(r.cfg.StallTimeout, minScanTimeout) }

// idle waits for a notification or the poll interval, reading the metrics
// first when they are due.
func (r *Relay) idle(ctx context.Context, conn *pgx.Conn) error {
	if time.Since(r.lastMetrics) >= r.cfg.MetricsInterval {
		if err := r.readMetrics(ctx, conn); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
	_, err := conn.WaitForNotification(wctx)
	cancel()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && !errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("waiting for a notification: %w", err)
	}
	return nil
}

// readMetrics reads the backlog and the oldest unpublished row's age: the
// rows at or above the cursor's lower bound, less those of the open window
// already published. It counts at most backlogCountLimit rows, under
// scanTimeout; beyond that the age is the oldest of the rows counted (found
// through the tx index, mostly those of the oldest transactions). An ORDER
// BY tx made the planner walk every partition's tx index from its start.
func (r *Relay) readMetrics(ctx context.Context, conn *pgx.Conn) error {
	r.lastMetrics = time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.scanTimeout())
	defer cancel()
	var (
		n   int64
		age float64
	)
	err := conn.QueryRow(ctx, `
SELECT count(*), coalesce(extract(epoch FROM pg_catalog.clock_timestamp() - min(b.created_at)), 0)::float8
  FROM (SELECT o.created_at
          FROM `+r.tbl.ident()+` o, `+r.tbl.cursorIdent()+` c
         WHERE o.tx >= c.lo AND (o.tx >= c.hi OR c.after IS NULL OR o.event_id > c.after)
         LIMIT $1) b`, backlogCountLimit).Scan(&n, &age)
	if err != nil {
		return fmt.Errorf("reading the backlog: %w", err)
	}
	r.cfg.Metrics.Backlog.Set(float64(n))
	r.cfg.Metrics.OldestAge.Set(age)
	return nil
}

func (r *Relay) sleep(ctx context.Context, attempt int) error {
	d := r.cfg.Backoff << min(attempt, 20)
	if d <= 0 || d > r.cfg.MaxBackoff {
		d = r.cfg.MaxBackoff
	}
	d = d/2 + rand.N(d/2+1) //nolint:gosec // G404: jitter, not a secret
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// resetLockWait is how long ResetCursor waits for the ownership lock.
const resetLockWait = 3 * time.Second

// ResetCursor moves the cursor of t to the transaction id from, an explicit
// operation (docs/outbox.md): rows of transactions below it count as
// published and are never sent; rows at or above are sent again. nil
// means the current horizon: everything committed so far is skipped. It
// takes the ownership lock first (waiting up to 3s) and refuses while a
// relay holds it.
func ResetCursor(ctx context.Context, conn *pgx.Conn, t Table, from *uint64) (lo uint64, err error) {
	t = t.WithDefaults()
	var key int64
	if err := conn.QueryRow(ctx, `SELECT lock_key FROM `+t.cursorIdent()).Scan(&key); err != nil {
		return 0, fmt.Errorf("resetting the cursor of %s: %w", t, err)
	}
	// A relay that was just stopped gives the lock back when its server
	// process ends, a moment after its client closed: wait a little.
	var got bool
	for deadline := time.Now().Add(resetLockWait); ; {
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
			return 0, fmt.Errorf("resetting the cursor of %s: %w", t, err)
		}
		if got || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !got {
		return 0, fmt.Errorf("resetting the cursor of %s: a relay owns the stream; stop every relay first", t)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_catalog.pg_advisory_unlock($1)`, key) }()
	var to *string
	if from != nil {
		s := strconv.FormatUint(*from, 10)
		to = &s
	}
	var s string
	err = conn.QueryRow(ctx, `UPDATE `+t.cursorIdent()+` SET lo = x.v, hi = x.v, after = NULL, updated_at = pg_catalog.now()
  FROM (SELECT coalesce($1::text::pg_catalog.xid8, pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())) AS v) x RETURNING lo::text`, to).Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("resetting the cursor of %s: %w", t, err)
	}
	return parseXid(s)
}

// CursorAheadError: the relay's cursor names transaction ids this database
// has not assigned yet. The outbox and its cursor were copied to another
// cluster (pg_dump and restore, logical replication, a blue/green move):
// its new rows carry the new cluster's lower ids, below the cursor, and
// would never be published, with a backlog metric of 0. A physical copy
// (a standby promoted, a base backup restored) keeps the ids and is fine.
// The relay refuses to run until the cursor is reset (ResetCursor).
type CursorAheadError struct {
	Table    string
	Lo, Hi   uint64 // the cursor's window
	NextXact uint64 // pg_snapshot_xmax: the next transaction id
}

func (e *CursorAheadError) Error() string {
	return fmt.Sprintf("outbox %s: the relay's cursor (transaction ids %d to %d) is ahead of this database's next transaction id %d: "+
		"the outbox was copied from another cluster with its cursor, and its new rows would never be published; "+
		"stop every relay and reset the cursor (outbox.ResetCursor, docs/outbox.md \"Resetting the cursor\")", e.Table, e.Lo, e.Hi, e.NextXact)
}

// checkCursor reads the cursor and refuses one ahead of the database's
// transaction ids.
func (r *Relay) checkCursor(ctx context.Context, conn *pgx.Conn) (cursor, error) {
	var (
		lo, hi, next string
		c            cursor
	)
	err := conn.QueryRow(ctx, `SELECT c.lo::text, c.hi::text, c.after, pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text FROM `+r.tbl.cursorIdent()+` c`).
		Scan(&lo, &hi, &c.after, &next)
	if err != nil {
		return c, fmt.Errorf("reading the cursor: %w", err)
	}
	var n uint64
	if c.lo, err = parseXid(lo); err == nil {
		if c.hi, err = parseXid(hi); err == nil {
			n, err = parseXid(next)
		}
	}
	if err != nil {
		return c, fmt.Errorf("reading the cursor: %w", err)
	}
	if c.lo > n || c.hi > n {
		return c, &CursorAheadError{Table: r.tbl.String(), Lo: c.lo, Hi: c.hi, NextXact: n}
	}
	return c, nil
}
