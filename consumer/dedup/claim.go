package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The claim functions let any client deduplicate with one SQL call, inside its
// own transaction, with the same verdicts as the Go Inserter:
//
//	<schema>.<table>_claim(ids uuid[], consumer_group text DEFAULT NULL)
//	    RETURNS TABLE (event_id uuid, verdict text)
//	<schema>.<table>_claim_one(id uuid, consumer_group text DEFAULT NULL)
//	    RETURNS text
//
// Each input element gets one row, in input order, with one of the verdicts
// below. The engine installs them with the table (EnsureTable) and replaces
// them when their definition changes. docs/any-language.md ("The SQL contract") is the contract
// for clients.

// The verdicts of the claim functions.
const (
	// VerdictNew: the id was recorded by this call; the row commits or rolls
	// back with the caller's transaction. Process the event.
	VerdictNew = "new"
	// VerdictDuplicate: the id is already recorded (under ScopeConsumerGroup
	// for this group, under ScopeGlobal by anyone), or it came earlier in the
	// same call. Skip the event.
	VerdictDuplicate = "duplicate"
	// VerdictOutsideWindow: no attached partition (one pending detach does
	// not count) covers the id's UUID v7 time; nothing was recorded.
	VerdictOutsideWindow = "outside_window"
	// VerdictNotV7: the id is NULL or not a UUID version 7 with the RFC 9562
	// variant; nothing was recorded.
	VerdictNotV7 = "not_v7"
)

// claimSuffix and claimOneSuffix name the claim functions after the table.
// With MaxTableNameLen the longer one ends at 61 bytes, within
// MaxIdentifierLen, so the server never truncates the name.
const (
	claimSuffix    = "_claim"
	claimOneSuffix = "_claim_one"
)

// claimVersion is the version of the functions' definition, recorded in their
// marker comment.
const claimVersion = 2

// ClaimFunction returns the schema-qualified name of t's batch claim function,
// <schema>.<table>_claim. The identifiers are validated lower-case
// [a-z0-9_], so the name can be used in SQL as it is.
func (t Table) ClaimFunction() string {
	t = t.WithDefaults()
	return t.Schema + "." + t.Name + claimSuffix
}

// ClaimOneFunction returns the schema-qualified name of t's single-id claim
// function, <schema>.<table>_claim_one.
func (t Table) ClaimOneFunction() string {
	t = t.WithDefaults()
	return t.Schema + "." + t.Name + claimOneSuffix
}

// claimMarker is the COMMENT on each claim function: it names the dedup table
// the function belongs to, so a function of someone else's with the same name
// and arguments is never replaced.
type claimMarker struct {
	ClaimOf string `json:"idempotency.dev/claim-of"` // schema.table
	Version int    `json:"version"`
}

func parseClaimMarker(comment *string) (claimMarker, bool) {
	if comment == nil {
		return claimMarker{}, false
	}
	var m claimMarker
	if err := json.Unmarshal([]byte(*comment), &m); err != nil || m.ClaimOf == "" {
		return claimMarker{}, false
	}
	return m, true
}

// claimSearchPath is the functions' own search_path. Their bodies name
// operators (=, <>, >=, ||) and types (uuid, text) without a schema, and they
// run with the caller's settings (SECURITY INVOKER): without it an operator
// in a schema the caller lists before pg_catalog, or a type named uuid in the
// caller's temporary schema (searched for types before pg_catalog unless
// listed), changes the verdicts or fails the call. pg_temp last, as
// PostgreSQL's documentation advises; functions and operators are never
// looked up there unqualified. A SET clause restores only search_path on
// exit, so the transaction-local mark (claimSettingName) survives the call.
// proconfigSearchPath is how pg_proc.proconfig shows it.
const (
	claimSearchPath     = "pg_catalog, pg_temp"
	proconfigSearchPath = "search_path=pg_catalog, pg_temp"
)

// claimFunc is one function to install: its name, SQL argument types (as
// oidvectortypes prints them, for the lookup), its body and its full CREATE
// statement.
type claimFunc struct {
	name   string
	args   string // e.g. "uuid[], text"
	body   string // prosrc, compared to decide whether to replace
	create string
}

// claimFuncs returns the definitions of t's two claim functions.
func claimFuncs(t Table) []claimFunc {
	t = t.WithDefaults()
	batch := claimFunc{name: t.Name + claimSuffix, args: "uuid[], text", body: claimBody(t)}
	batchIdent := pgx.Identifier{t.Schema, batch.name}.Sanitize()
	batch.create = fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s(ids uuid[], consumer_group text DEFAULT NULL)
RETURNS TABLE (event_id uuid, verdict text)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT SECURITY INVOKER PARALLEL UNSAFE
SET search_path = %s
AS $idempotency_claim$%s$idempotency_claim$`, batchIdent, claimSearchPath, batch.body)

	one := claimFunc{name: t.Name + claimOneSuffix, args: "uuid, text", body: claimOneBody(t, batchIdent)}
	one.create = fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s(id uuid, consumer_group text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT SECURITY INVOKER PARALLEL UNSAFE
SET search_path = %s
AS $idempotency_claim$%s$idempotency_claim$`, pgx.Identifier{t.Schema, one.name}.Sanitize(), claimSearchPath, one.body)
	return []claimFunc{batch, one}
}

// claimBody is the PL/pgSQL body of the batch function. The identifiers are
// validated [a-z0-9_] and quoted; the literals are the same names.
//
// How it stays out of the caller's way:
//   - Under ScopeConsumerGroup a NULL or empty group is a programming error:
//     it raises 22023 before anything is inserted (that aborts the caller's
//     transaction, as any SQL error does). Under ScopeGlobal the group is
//     only recorded, and NULL is recorded as the empty string.
//   - Ids are classified first (not_v7, outside_window) and only the others
//     are inserted, distinct and sorted, so two concurrent claims lock
//     shared ids in the same order and cannot deadlock; ON CONFLICT DO
//     NOTHING turns a recorded id into "duplicate" (and waits for a
//     concurrent uncommitted insert of it, as the Go Inserter does).
//   - The coverage is read from pg_inherits in the same statement as the
//     insert, so with the statement's snapshot: a DETACH ... CONCURRENTLY
//     that has marked a partition pending is either visible to both (the
//     partition does not cover, the insert does not route to it) or to
//     neither. The parent is locked (ROW EXCLUSIVE) before that statement
//     takes its snapshot, so a plain DETACH (ACCESS EXCLUSIVE) cannot commit
//     in between, and the final step of a concurrent detach waits for this
//     transaction. pg_get_expr gets relation 0: partition bounds hold only
//     constants, and with 0 it opens (and locks) no partition.
//   - Two cases remain where the bounds cover an id that no partition
//     accepts: a partition that is itself partitioned with a gap inside its
//     bounds (never one of ours), and a partition ATTACHed after this
//     transaction took the parent's lock, which PostgreSQL does not
//     re-check for invalidations (lmgr.c skips them for a lock already
//     held), so routing could use a partition descriptor cached before the
//     attach (not reproduced on 15.18: TestClaimPartitionAttachedDuringTransaction
//     accepts both outcomes). The insert then fails with 23514. So the
//     insert runs inside an EXCEPTION block (a subtransaction) only when
//     the table has a partitioned partition or the transaction claimed on
//     the table before (a transaction-local setting marks that); the first
//     claim of a transaction takes the lock afresh, which refreshes the
//     descriptor. Likewise under REPEATABLE READ and SERIALIZABLE, where the
//     statement runs with the transaction's snapshot, which can predate a
//     plain DETACH that the descriptor already reflects. When the block catches 23514 it records the ids one at a
//     time and reports those refused as outside_window.
func claimBody(t Table) string {
	parent := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	scopeCheck := ""
	if t.Scope == ScopeConsumerGroup {
		scopeCheck = fmt.Sprintf(`
  IF _grp IS NULL OR _grp = '' THEN
    RAISE EXCEPTION 'claiming event ids in %s: consumer_group is required (the table''s scope is ConsumerGroup), got %%', coalesce(quote_literal(_grp), 'NULL')
      USING ERRCODE = '22023', HINT = 'pass the Kafka consumer group id as the second argument';
  END IF;`, t.String())
	}
	// classify is the common head of the statements: the input with its
	// order, the ranges that accept rows, and each element's verdict so far
	// (NULL: to be inserted).
	classify := fmt.Sprintf(`
  WITH input AS (
    SELECT u.id, u.ord FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord)
  ), bounds AS (
    SELECT b.expr = 'DEFAULT' AS dflt,
           pg_catalog.regexp_match(b.expr, '^FOR VALUES FROM \((.+)\) TO \((.+)\)$') AS m
      FROM (SELECT pg_catalog.pg_get_expr(c.relpartbound, 0) AS expr
              FROM pg_catalog.pg_inherits i
              JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = (SELECT p.oid FROM pg_catalog.pg_class p
                                    JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
                                   WHERE n.nspname = %s AND p.relname = %s)
               AND NOT i.inhdetachpending) AS b
  ), ranges AS MATERIALIZED (
    SELECT r.dflt,
           r.m[1] = 'MINVALUE' AS lo_min,
           pg_catalog.substring(r.m[1], '^''([0-9a-f-]{36})''(?:::uuid)?$')::uuid AS lo,
           r.m[2] = 'MAXVALUE' AS hi_max,
           pg_catalog.substring(r.m[2], '^''([0-9a-f-]{36})''(?:::uuid)?$')::uuid AS hi
      FROM bounds AS r
  ), cls AS (
    SELECT input.id, input.ord,
           CASE WHEN input.id IS NULL
                  OR pg_catalog.substr(input.id::text, 15, 1) <> '7'
                  OR pg_catalog.substr(input.id::text, 20, 1) NOT IN ('8', '9', 'a', 'b') THEN 'not_v7'
                WHEN NOT EXISTS (SELECT 1 FROM ranges AS r
                                  WHERE r.dflt
                                     OR ((r.lo_min OR input.id >= r.lo) AND (r.hi_max OR input.id < r.hi))) THEN 'outside_window'
           END AS v
      FROM input
  )`, lit(t.Schema), lit(t.Name))
	// The statement that classifies, inserts and assigns every verdict: the
	// first occurrence of an id inserted now is new, later ones duplicates.
	claimAll := classify + fmt.Sprintf(`, ins AS (
    INSERT INTO %s AS t (event_id, consumer_group)
    SELECT DISTINCT cls.id, _grp FROM cls WHERE cls.v IS NULL ORDER BY 1
    ON CONFLICT DO NOTHING
    RETURNING t.event_id
  ), res AS (
    SELECT cls.id, cls.ord,
           coalesce(cls.v, CASE WHEN ins.event_id IS NOT NULL
                                 AND pg_catalog.row_number() OVER (PARTITION BY cls.id ORDER BY cls.ord) = 1
                                THEN 'new' ELSE 'duplicate' END) AS v
      FROM cls LEFT JOIN ins ON ins.event_id = cls.id
  )
  `, parent)
	// The fast path returns the rows as the statement makes them; the
	// careful one collects them first, so that nothing is returned from a
	// statement the EXCEPTION block undoes.
	claimReturn := "\n  RETURN QUERY" + claimAll + "SELECT res.id, res.v FROM res ORDER BY res.ord;"
	claimCollect := claimAll + `SELECT pg_catalog.array_agg(res.id ORDER BY res.ord), pg_catalog.array_agg(res.v ORDER BY res.ord)
    INTO _ids, _verdicts FROM res;`

	classifyOnly := classify + `
  SELECT pg_catalog.array_agg(cls.id ORDER BY cls.ord), pg_catalog.array_agg(cls.v ORDER BY cls.ord)
    INTO _ids, _verdicts FROM cls;`
	return strings.NewReplacer(
		"{scope_check}", scopeCheck,
		"{setting}", lit(claimSettingName(t)),
		"{parent}", parent,
		"{schema}", lit(t.Schema),
		"{table}", lit(t.Name),
		"{claim_return}", claimReturn,
		"{claim_collect}", claimCollect,
		"{classify_only}", classifyOnly,
	).Replace(`
#variable_conflict use_column
DECLARE
  _grp text := consumer_group;
  _careful boolean;
  _ids uuid[];
  _verdicts text[];
  _todo uuid[];
  _fresh uuid[] := '{}';
  _gone uuid[] := '{}';
  _seen uuid[] := '{}';
  _id uuid;
  _got uuid;
BEGIN{scope_check}
  _grp := coalesce(_grp, '');
  IF ids IS NULL OR pg_catalog.cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  -- Careful (the insert in a subtransaction) unless this is the
  -- transaction's first claim on the table, under READ COMMITTED (a
  -- transaction snapshot can predate a DETACH), and no partition is itself
  -- partitioned (its own partitions may leave gaps inside its bounds).
  _careful := coalesce(pg_catalog.current_setting({setting}, true), '') <> ''
    OR pg_catalog.current_setting('transaction_isolation') <> 'read committed'
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i
                 JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = (SELECT p.oid FROM pg_catalog.pg_class p
                                       JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
                                      WHERE n.nspname = {schema} AND p.relname = {table})
                  AND c.relkind = 'p');
  LOCK TABLE ONLY {parent} IN ROW EXCLUSIVE MODE;
  PERFORM pg_catalog.set_config({setting}, 'claimed', true);
  IF NOT _careful THEN{claim_return}
    RETURN;
  END IF;
  BEGIN{claim_collect}
  EXCEPTION WHEN check_violation THEN
    -- Some id no partition accepts after all: record the ids one at a
    -- time, in order, and report those refused as outside the window.
    {classify_only}
    SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO _todo
      FROM ROWS FROM (pg_catalog.unnest(_ids), pg_catalog.unnest(_verdicts)) AS u(id, v) WHERE u.v IS NULL;
    FOREACH _id IN ARRAY coalesce(_todo, '{}') LOOP
      BEGIN
        INSERT INTO {parent} AS t (event_id, consumer_group) VALUES (_id, _grp)
        ON CONFLICT DO NOTHING RETURNING t.event_id INTO _got;
        IF FOUND THEN
          _fresh := _fresh || _id;
        END IF;
      EXCEPTION WHEN check_violation THEN
        _gone := _gone || _id;
      END;
    END LOOP;
    FOR i IN 1 .. pg_catalog.cardinality(_ids) LOOP
      IF _verdicts[i] IS NULL THEN
        IF _ids[i] = ANY (_gone) THEN
          _verdicts[i] := 'outside_window';
        ELSIF _ids[i] = ANY (_fresh) AND NOT _ids[i] = ANY (_seen) THEN
          _verdicts[i] := 'new';
        ELSE
          _verdicts[i] := 'duplicate';
        END IF;
        _seen := _seen || _ids[i];
      END IF;
    END LOOP;
  END;
  RETURN QUERY SELECT r.id, r.v
    FROM ROWS FROM (pg_catalog.unnest(_ids), pg_catalog.unnest(_verdicts)) WITH ORDINALITY AS r(id, v, ord)
   ORDER BY r.ord;
END
`)
}

// claimOneBody is the PL/pgSQL body of the single-id function. It gives the
// batch function's verdicts at about the cost of a plain INSERT ... ON
// CONFLICT DO NOTHING (make bench: RESULT claim). Measured on PostgreSQL 15
// (server time per call, without the round trip and commit): the plain
// insert about 40 us, claim_one as a call of the batch function about
// 180 us, of which reading and parsing the bounds of every partition
// (pg_get_expr, regexp_match) took about 90 us and the LOCK, the
// careful-path query and the CTE statement most of the rest; a lookup of
// the one partition of the id's slot by name still cost some 50 us more
// than the insert. So the first claim of a transaction under READ
// COMMITTED, the per-record pattern's only one, reads no catalog at all:
// it inserts, and lets the partition routing decide whether a partition
// accepts the id; an id none accepts fails with 23514 inside an EXCEPTION
// block (a subtransaction, one per transaction: the caller's transaction
// survives) and is outside_window, as the batch function's careful path
// reports it. Routing is what the batch function's bounds check predicts,
// with the same snapshot rules (a partition pending detach takes no rows).
// A later claim in the same transaction, and any claim under REPEATABLE
// READ or SERIALIZABLE, goes to the batch function, whose verdict it
// returns (one subtransaction per call there too, in its careful path). The
// checks come first, unchanged: the group (22023 under ScopeConsumerGroup)
// and not_v7.
func claimOneBody(t Table, batchIdent string) string {
	parent := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	scopeCheck := ""
	if t.Scope == ScopeConsumerGroup {
		scopeCheck = fmt.Sprintf(`
  IF _grp IS NULL OR _grp = '' THEN
    RAISE EXCEPTION 'claiming event ids in %s: consumer_group is required (the table''s scope is ConsumerGroup), got %%', coalesce(quote_literal(_grp), 'NULL')
      USING ERRCODE = '22023', HINT = 'pass the Kafka consumer group id as the second argument';
  END IF;`, t.String())
	}
	return strings.NewReplacer(
		"{scope_check}", scopeCheck,
		"{setting}", lit(claimSettingName(t)),
		"{parent}", parent,
		"{batch}", batchIdent,
	).Replace(`
#variable_conflict use_column
DECLARE
  _id uuid := id;
  _grp text := consumer_group;
  _hex text;
BEGIN{scope_check}
  _grp := coalesce(_grp, '');
  _hex := _id::text;
  IF _hex IS NULL OR pg_catalog.substr(_hex, 15, 1) <> '7' OR pg_catalog.substr(_hex, 20, 1) NOT IN ('8', '9', 'a', 'b') THEN
    RETURN 'not_v7';
  END IF;
  IF coalesce(pg_catalog.current_setting({setting}, true), '') <> ''
     OR pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    RETURN (SELECT c.verdict FROM {batch}(ARRAY[_id], _grp) AS c);
  END IF;
  PERFORM pg_catalog.set_config({setting}, 'claimed', true);
  BEGIN
    INSERT INTO {parent} AS t (event_id, consumer_group) VALUES (_id, _grp) ON CONFLICT DO NOTHING;
  EXCEPTION WHEN check_violation THEN
    RETURN 'outside_window';
  END;
  IF FOUND THEN
    RETURN 'new';
  END IF;
  RETURN 'duplicate';
END
`)
}

// claimSettingName is the transaction-local setting that marks a claim on t
// in the current transaction (see claimBody). Several tables may share a
// name (the separator can occur in names): a shared mark only sends a first
// claim down the careful path, never the other way.
func claimSettingName(t Table) string {
	return "idempotency_claim." + t.Schema + "__" + t.Name
}

// ensureClaim installs or upgrades the claim functions of the table: a
// function that does not exist is created, one of ours (its marker comment
// names this table) is replaced when its definition differs, and one that is
// not ours makes it fail with *NameConflictError, touching nothing. It runs
// after the table exists, in a session of its own under the table's advisory
// lock, so two maintainers never replace the same function at once.
func (e *Engine) ensureClaim(ctx context.Context) error {
	conn, release, err := e.session(ctx)
	if err != nil {
		return fmt.Errorf("ensuring claim functions of %s: %w", e.table, err)
	}
	defer release()
	return e.ensureClaimOn(ctx, conn)
}

// ensureClaimOn is ensureClaim on a session that holds the table's advisory
// lock (EnsureTable runs it on its own session).
func (e *Engine) ensureClaimOn(ctx context.Context, conn *pgx.Conn) error {
	marker, err := jsonLiteral(claimMarker{ClaimOf: e.table.String(), Version: claimVersion})
	if err != nil {
		return err
	}
	for _, f := range claimFuncs(e.table) {
		var (
			src, comment *string
			config       []string
			found, exec  bool
		)
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `
SELECT true, p.prosrc, pg_catalog.obj_description(p.oid, 'pg_proc'), coalesce(p.proconfig, '{}'),
       pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = $1 AND p.proname = $2 AND pg_catalog.oidvectortypes(p.proargtypes) = $3`,
			e.table.Schema, f.name, f.args).Scan(&found, &src, &comment, &config, &exec)
		cancel()
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("looking up function %s: %w", f.name, err)
		}
		if found {
			if m, ok := parseClaimMarker(comment); !ok || m.ClaimOf != e.table.String() {
				return &NameConflictError{Table: e.table.String(), Name: e.table.Schema + "." + f.name + "(" + f.args + ")", Kind: "function", Need: "the claim function"}
			}
			// The settings count too: an older version was installed without
			// its search_path, and the body alone would not show that.
			if src != nil && *src == f.body && slices.Equal(config, []string{proconfigSearchPath}) && exec {
				continue // up to date: replacing it would only invalidate every session's cached plan
			}
		}
		ident := pgx.Identifier{e.table.Schema, f.name}.Sanitize()
		// EXECUTE for PUBLIC explicitly: a database whose default privileges
		// revoke it (a common hardening) would otherwise leave a role with
		// the documented table privileges unable to call the function. It
		// grants nothing: the functions are SECURITY INVOKER.
		sql := f.create + ";\nCOMMENT ON FUNCTION " + ident + "(" + f.args + ") IS " + marker +
			";\nGRANT EXECUTE ON FUNCTION " + ident + "(" + f.args + ") TO PUBLIC"
		if err := e.ddl(ctx, conn, "installing function "+f.name, sql); err != nil {
			return fmt.Errorf("ensuring claim functions of %s: %w", e.table, err)
		}
	}
	return nil
}

// dropClaim drops the claim functions whose marker names this table; a
// missing one, or one that is not ours, is left alone. DropTable is to call it
// (with the positions table) once it has established that the table is ours:
// DROP TABLE does not drop them, a PL/pgSQL body records no dependency.
func (e *Engine) dropClaim(ctx context.Context, conn *pgx.Conn) error {
	for _, f := range claimFuncs(e.table) {
		var comment *string
		qctx, cancel := e.bounded(ctx)
		err := conn.QueryRow(qctx, `
SELECT pg_catalog.obj_description(p.oid, 'pg_proc')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = $1 AND p.proname = $2 AND pg_catalog.oidvectortypes(p.proargtypes) = $3`, e.table.Schema, f.name, f.args).Scan(&comment)
		cancel()
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("looking up function %s: %w", f.name, err)
		}
		if m, ok := parseClaimMarker(comment); !ok || m.ClaimOf != e.table.String() {
			continue // not ours: never touched
		}
		// The single-id function calls the batch one; both go, in either
		// order (a SQL body's reference is checked only when it runs).
		sql := "DROP FUNCTION " + pgx.Identifier{e.table.Schema, f.name}.Sanitize() + "(" + f.args + ")"
		if err := e.ddl(ctx, conn, "dropping function "+f.name, sql); err != nil {
			return err
		}
	}
	return nil
}
