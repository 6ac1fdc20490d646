package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The topic check. WithTopics names the topics an outbox publishes to; a
// row for any other would hold the relay's stream (a topic that does not
// exist, or one its KafkaUser may not write) or go where the service should
// not publish. The emit function checks the topic first, for its error
// message; the authority is a BEFORE INSERT trigger on the table
// (idempotency_outbox_topics, function <table>_topics), which also sees a
// plain INSERT (emitters may insert the event's columns) and COPY, and
// cannot be passed by a session that still runs an older emit function. It
// is ENABLE ALWAYS, so session_replication_role = replica (a logical
// replication worker, pg_restore --disable-triggers) does not skip it;
// Ensure repairs a trigger someone disabled.
//
// Changing the list never waits for the emitters. The trigger function is
// replaced with CREATE OR REPLACE, which takes no lock of the table; an
// insert that takes its ROW EXCLUSIVE lock of the table afterwards reads the
// catalog again (PostgreSQL processes invalidations when a lock is
// acquired) and runs the new function. Only a transaction that held that
// lock already may still run the old one. So the change is pending until
// every transaction that held an insert's lock on the table or a partition
// right after the change committed has ended (a prepared one until it is
// resolved), as CREATE INDEX CONCURRENTLY waits for older transactions;
// TopicsSettled says when. Their virtual transaction ids (pg_locks, which
// every role may read) are kept in the function's comment, so any later
// call can tell, as can another process; a virtual id is not reused while
// its backend's counter runs on, and a transaction that ended holds no
// lock. "N/0" is no transaction (one whose commit is done but whose locks
// are not yet released, or a session holding a session lock): never waited
// for. The change commits with a mark that the list is not read yet ("?"),
// so a change cut off before its list is written stays pending and
// TopicsSettled reads the list then. Two processes changing one table's
// list at once could write each other's list over; the operator's leader
// election keeps it to one.
//
// What a settled change promises (a topic retired by the operator,
// controllers/outbox_retire.go, relies on it): every row for a topic no
// longer listed is from a transaction whose id is below any transaction id
// taken afterwards (Horizon): the transactions that could still write one
// have ended.
//
// Creating the trigger (a table made before it existed) or enabling it
// again takes a SHARE ROW EXCLUSIVE lock of the table, which does wait for
// the emitters, up to the engine's lock_timeout: a timeout leaves the check
// as it was and Ensure returns a *TopicCheckPendingError after doing the
// rest, to be tried again.

const (
	topicsSuffix  = "_topics"
	topicsTrigger = "idempotency_outbox_topics"
	// pendingPrefix starts the function's comment while a change is not
	// settled: the virtual transaction ids waited for follow, comma
	// separated.
	pendingPrefix = "idempotency.dev/topics-pending-on="
)

// TopicCheckPendingError: the topic check could not be installed or enabled
// (its lock was not granted in time); everything else Ensure does is done.
type TopicCheckPendingError struct {
	Table string
	Err   error
}

func (e *TopicCheckPendingError) Error() string {
	return fmt.Sprintf("outbox %s: the topic check is not installed yet (it waits for the transactions that insert into the table): %v", e.Table, e.Err)
}

func (e *TopicCheckPendingError) Unwrap() error { return e.Err }

func topicsIdent(t Table) string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name + topicsSuffix}.Sanitize()
}

// topicsBody is the trigger function's source for topics (none: any), the
// same for the same set in any order.
func topicsBody(t Table, topics []string) string {
	if len(topics) == 0 {
		return "\nBEGIN\n  RETURN NEW;\nEND\n"
	}
	topics = slices.Clone(topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	lits := make([]string, len(topics))
	for i, tp := range topics {
		lits[i] = lit(tp)
	}
	list := strings.Join(topics, ", ")
	return fmt.Sprintf(`
BEGIN
  IF NEW.topic IS NULL OR NOT (NEW.topic = ANY (ARRAY[%s]::text[])) THEN
    RAISE EXCEPTION 'emitting to outbox %s: topic %% is not one the outbox publishes to (%s): committed, it would hold the relay''s stream or go where the service should not publish; add it to the Outbox''s spec.kafka.topics', pg_catalog.quote_nullable(NEW.topic)
      USING ERRCODE = '22023';
  END IF;
  RETURN NEW;
END
`, strings.Join(lits, ", "), strings.ReplaceAll(t.String(), "'", "''"), strings.ReplaceAll(strings.ReplaceAll(list, "'", "''"), "%", "%%"))
}

// topicCheckState is what the catalog says of the check.
type topicCheckState struct {
	src *string // the function's source; nil: no function
	// armed: the trigger is on the table and every partition, ENABLE
	// ALWAYS, calling the function.
	armed bool
}

func readTopicCheck(ctx context.Context, conn *pgx.Conn, t Table) (topicCheckState, error) {
	var st topicCheckState
	err := conn.QueryRow(ctx, `
WITH f AS (SELECT pg_catalog.to_regprocedure($1) AS oid),
     tree AS (SELECT relid FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($2)))
SELECT (SELECT p.prosrc FROM pg_catalog.pg_proc p, f WHERE p.oid = f.oid),
       (SELECT count(*) FROM tree) > 0 AND NOT EXISTS (
         SELECT 1 FROM tree
          WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g, f
                             WHERE g.tgrelid = tree.relid AND g.tgname = $3 AND g.tgenabled = 'A' AND g.tgfoid = f.oid))`,
		topicsIdent(t)+"()", t.ident(), topicsTrigger).Scan(&st.src, &st.armed)
	if err != nil {
		return st, fmt.Errorf("reading the topic check of %s: %w", t, err)
	}
	return st, nil
}

// ensureTopicCheck installs the check for topics on conn (the engine's
// session, lock_timeout set): the trigger, armed, under its lock when it is
// missing or disarmed; otherwise only the function, replaced without a lock
// when its source differs, the change then pending (above).
func ensureTopicCheck(ctx context.Context, conn *pgx.Conn, t Table, topics []string) error {
	t = t.WithDefaults()
	body := topicsBody(t, topics)
	st, err := readTopicCheck(ctx, conn, t)
	if err != nil {
		return err
	}
	if st.armed && st.src != nil && *st.src == body {
		return nil
	}
	replace := `CREATE OR REPLACE FUNCTION ` + topicsIdent(t) + `() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $idempotency_topics$` + body + `$idempotency_topics$`
	if !st.armed {
		// CREATE TRIGGER and ENABLE ALWAYS take SHARE ROW EXCLUSIVE, which
		// waits for every inserter: once granted, no transaction can run
		// an older check, so nothing is pending.
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, replace); err != nil {
				return err
			}
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = pg_catalog.to_regclass($1) AND tgname = $2)`,
				t.ident(), topicsTrigger).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				if _, err := tx.Exec(ctx, `CREATE TRIGGER `+topicsTrigger+` BEFORE INSERT ON `+t.ident()+` FOR EACH ROW EXECUTE FUNCTION `+topicsIdent(t)+`()`); err != nil {
					return err
				}
			}
			// Recurses to the partitions; later ones get it armed too.
			if _, err := tx.Exec(ctx, `ALTER TABLE `+t.ident()+` ENABLE ALWAYS TRIGGER `+topicsTrigger); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `COMMENT ON FUNCTION `+topicsIdent(t)+`() IS NULL`)
			return err
		})
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
			return &TopicCheckPendingError{Table: t.String(), Err: err}
		}
		if err != nil {
			return fmt.Errorf("installing the topic check of %s: %w", t, err)
		}
		return nil
	}
	// The change and a pending mark with no list yet, in one transaction:
	// if what follows never runs (a crash, a timeout), TopicsSettled finds
	// the mark and takes the list then.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, replace); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `COMMENT ON FUNCTION `+topicsIdent(t)+`() IS '`+pendingPrefix+unknownHolders+`'`)
		return err
	})
	if err != nil {
		return fmt.Errorf("changing the topic check of %s: %w", t, err)
	}
	if _, err := recordHolders(ctx, conn, t); err != nil {
		return fmt.Errorf("changing the topic check of %s: %w", t, err)
	}
	return nil
}

// unknownHolders stands for the list while it is not read yet.
const unknownHolders = "?"

// recordHolders reads the sessions that hold an insert's lock on t now and
// keeps them as the pending list (read after the change committed: every
// transaction that could still run the former check holds its lock then;
// later is safe too, as those still running still hold it).
func recordHolders(ctx context.Context, conn *pgx.Conn, t Table) ([]string, error) {
	var holders []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT l.virtualtransaction ORDER BY l.virtualtransaction), '{}')`+insertLockers, t.ident()).Scan(&holders); err != nil {
		return nil, err
	}
	list := strings.Join(holders, ",")
	if list == "" {
		list = "-" // none
	}
	_, err := conn.Exec(ctx, `COMMENT ON FUNCTION `+topicsIdent(t)+`() IS '`+pendingPrefix+strings.ReplaceAll(list, "'", "''")+`'`)
	return holders, err
}

// insertLockers is the FROM and WHERE of the granted locks an insert takes
// or allows, on the table ($1) or a partition, held by other sessions.
const insertLockers = `
  FROM pg_catalog.pg_locks l
 WHERE l.locktype = 'relation' AND l.granted
   AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
   AND l.relation IN (SELECT relid FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)))
   AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
   AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
   AND l.virtualtransaction NOT LIKE '%/0'` // no transaction: ended (its locks not yet released) or a session lock

// TopicsSettled reports whether t's topic check is armed and its last
// change settled: no transaction that may still run an earlier check is
// open (above). It needs the table's owner (it may write the comment), as
// Ensure does.
func TopicsSettled(ctx context.Context, conn *pgx.Conn, t Table) (bool, error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return false, err
	}
	st, err := readTopicCheck(ctx, conn, t)
	if err != nil || !st.armed {
		return false, err
	}
	var comment *string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.obj_description(pg_catalog.to_regprocedure($1), 'pg_proc')`, topicsIdent(t)+"()").Scan(&comment); err != nil {
		return false, fmt.Errorf("reading the topic check of %s: %w", t, err)
	}
	if comment == nil || !strings.HasPrefix(*comment, pendingPrefix) {
		return true, nil
	}
	list := strings.TrimPrefix(*comment, pendingPrefix)
	if list == unknownHolders {
		// A change whose list was never read: read it now.
		if _, err := recordHolders(ctx, conn, t); err != nil {
			return false, fmt.Errorf("reading the transactions older than the topic check of %s: %w", t, err)
		}
		return false, nil
	}
	var waited []string
	for _, v := range strings.Split(list, ",") {
		if v != "-" && !strings.HasSuffix(v, "/0") { // /0: none (recorded by an earlier version)
			waited = append(waited, v)
		}
	}
	// Any of them still running holds at least its virtual xid's lock. The
	// mark stays (clearing it could erase a newer change's list); a
	// virtual xid is not reused while its backend's counter runs on.
	var older bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE virtualtransaction = ANY ($1::text[]))`, waited).Scan(&older)
	if err != nil {
		return false, fmt.Errorf("looking for transactions older than the topic check of %s: %w", t, err)
	}
	return !older, nil
}
