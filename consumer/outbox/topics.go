package outbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The topic check. WithTopics names the topics an outbox publishes to; a
// row for any other would hold the relay's stream (a topic that does not
// exist, or one its KafkaUser may not write) or go where the service should
// not publish. The emit function checks the topic first, for its error
// message; the authority is a BEFORE INSERT trigger on the table, which
// also sees a plain INSERT (emitters may insert the event's columns) and
// cannot be passed by a session that still runs an older emit function.
//
// What a change of the list promises (a topic retired by the operator,
// controllers/outbox_retire.go, relies on it): once Ensure has returned,
// every row for a topic no longer listed is from a transaction whose id is
// below any transaction id taken afterwards (Horizon). The trigger function
// is replaced under a SHARE lock of the table (and, by LOCK TABLE's
// recursion, its partitions), which waits for every transaction that has
// inserted into it to end and makes every later insert wait until the new
// function is committed. A later insert takes its ROW EXCLUSIVE lock anew
// and so reads the catalog again (PostgreSQL processes invalidations when a
// lock is acquired), running the new function. A transaction that held the
// lock before has ended, its id below the horizon. The lock is taken only
// when the list changes (the function's source differs), so the usual
// Ensure of every reconcile blocks no insert; it waits at most the
// engine's lock_timeout, and a timeout fails Ensure, to be retried.

const (
	topicsSuffix  = "_topics"
	topicsTrigger = "idempotency_outbox_topics"
)

func topicsIdent(t Table) string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name + topicsSuffix}.Sanitize()
}

// topicsBody is the trigger function's source for topics (none: any).
func topicsBody(t Table, topics []string) string {
	if len(topics) == 0 {
		return "\nBEGIN\n  RETURN NEW;\nEND\n"
	}
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

// ensureTopicCheck installs the trigger and its function for topics, or
// replaces the function when its source differs, under a SHARE lock of the
// table (above). conn is the engine's session (lock_timeout set).
func ensureTopicCheck(ctx context.Context, conn *pgx.Conn, t Table, topics []string) error {
	t = t.WithDefaults()
	body := topicsBody(t, topics)
	var src *string
	var hasTrigger bool
	err := conn.QueryRow(ctx, `
SELECT (SELECT p.prosrc FROM pg_catalog.pg_proc p WHERE p.oid = pg_catalog.to_regprocedure($1)),
       EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g WHERE g.tgrelid = pg_catalog.to_regclass($2) AND g.tgname = $3)`,
		topicsIdent(t)+"()", t.ident(), topicsTrigger).Scan(&src, &hasTrigger)
	if err != nil {
		return fmt.Errorf("reading the topic check of %s: %w", t, err)
	}
	if src != nil && *src == body && hasTrigger {
		return nil
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+t.ident()+` IN SHARE MODE`); err != nil {
			return fmt.Errorf("locking %s to change its topics (every transaction that inserted into it must end first): %w", t, err)
		}
		_, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION `+topicsIdent(t)+`() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $idempotency_topics$`+body+`$idempotency_topics$`)
		if err != nil {
			return fmt.Errorf("installing the topic check of %s: %w", t, err)
		}
		if !hasTrigger {
			_, err := tx.Exec(ctx, `CREATE TRIGGER `+topicsTrigger+` BEFORE INSERT ON `+t.ident()+` FOR EACH ROW EXECUTE FUNCTION `+topicsIdent(t)+`()`)
			if err != nil {
				return fmt.Errorf("installing the topic check of %s: %w", t, err)
			}
		}
		return nil
	})
}
