package migrate

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// bounds lists the ranges' lower and upper bounds, for unnest in SQL.
func bounds(rs []dedup.KeyRange) (los, his []uuid.UUID) {
	for _, r := range rs {
		los, his = append(los, r.From), append(his, r.To)
	}
	return los, his
}

// classify is a query over the legacy table with each row's id, group,
// processing time and reason for not copying it (NULL when it is copied).
// $1 and $2 are the lower and upper bounds of the ranges, $3 and $4 arrays of
// their bounds, $5 Config.Group.
func classify(src source) string {
	return fmt.Sprintf(`
SELECT id, grp, at,
       CASE WHEN NOT is_v7 THEN '%s'
            WHEN covered THEN NULL
            WHEN id < $1 THEN '%s'
            WHEN id >= $2 THEN '%s'
            ELSE '%s' END AS reason
  FROM (SELECT s.%s AS id, %s AS grp, %s AS at, %s AS is_v7,
               EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest($3::uuid[]), pg_catalog.unnest($4::uuid[])) r(lo, hi) WHERE s.%s >= r.lo AND s.%s < r.hi) AS covered
          FROM %s s) x`,
		SkipNotV7, SkipTooOld, SkipTooNew, SkipInGap,
		src.id, src.groupExpr("s", "$5::text"), src.atExpr("s"), v7("s."+src.id), src.id, src.id, src.ident())
}

func classifyArgs(cfg Config, rs []dedup.KeyRange) []any {
	los, his := bounds(rs)
	return []any{rs[0].From, rs[len(rs)-1].To, los, his, cfg.Group}
}

// count fills the report's totals and samples.
func count(ctx context.Context, q querier, cfg Config, src source, rs []dedup.KeyRange, rep *Report) error {
	rows, err := q.Query(ctx, `SELECT coalesce(reason, ''), pg_catalog.count(*) FROM (`+classify(src)+`) c GROUP BY 1`, classifyArgs(cfg, rs)...)
	if err != nil {
		return fmt.Errorf("counting the rows of %s: %w", src, err)
	}
	for rows.Next() {
		var (
			reason string
			n      int64
		)
		if err := rows.Scan(&reason, &n); err != nil {
			rows.Close()
			return fmt.Errorf("counting the rows of %s: %w", src, err)
		}
		rep.Rows += n
		if reason == "" {
			rep.Eligible = n
		} else {
			rep.Skipped[reason] = n
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting the rows of %s: %w", src, err)
	}
	for reason, n := range rep.Skipped {
		if n == 0 {
			continue
		}
		ids, err := queryStrings(ctx, q, `SELECT coalesce(id::text, 'NULL') FROM (`+classify(src)+`) c WHERE reason = $6 ORDER BY id LIMIT $7`,
			append(classifyArgs(cfg, rs), reason, samples)...)
		if err != nil {
			return fmt.Errorf("sampling the rows of %s: %w", src, err)
		}
		rep.Samples[reason] = ids
	}
	return nil
}

// queryStrings runs a query returning one text column.
func queryStrings(ctx context.Context, q querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// copyRange copies the eligible rows of one range in batches, each its own
// transaction: INSERT ... SELECT ... ON CONFLICT DO NOTHING, so rows present
// already (an earlier run, the sync trigger, the consumers) are left alone.
func copyRange(ctx context.Context, q querier, cfg Config, src source, r dedup.KeyRange, rep *Report) error {
	target := pgx.Identifier{cfg.Table.Schema, cfg.Table.Name}.Sanitize()
	next := func(op string) string {
		// The last id of the next batch (uuid has no max aggregate).
		return fmt.Sprintf(`SELECT id FROM (SELECT s.%[1]s AS id FROM %[2]s s WHERE s.%[1]s %[3]s $1 AND s.%[1]s < $2 ORDER BY s.%[1]s LIMIT $3) b ORDER BY id DESC LIMIT 1`,
			src.id, src.ident(), op)
	}
	insert := func(op string) string {
		return fmt.Sprintf(`
WITH ins AS (
  INSERT INTO %[1]s (event_id, consumer_group, processed_at)
  SELECT s.%[2]s, %[3]s, %[4]s FROM %[5]s s
   WHERE s.%[2]s %[6]s $1 AND s.%[2]s <= $2 AND %[7]s
  ON CONFLICT DO NOTHING RETURNING 1)
SELECT pg_catalog.count(*) FROM ins`, target, src.id, src.groupExpr("s", "$3::text"), src.atExpr("s"), src.ident(), op, v7("s."+src.id))
	}
	from, op := r.From, ">="
	for {
		var last pgtype.UUID
		err := q.QueryRow(ctx, next(op), from, r.To, cfg.BatchSize).Scan(&last)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("copying from %s: finding the next batch: %w", src, err)
		}
		var n int64
		if err := q.QueryRow(ctx, insert(op), from, uuid.UUID(last.Bytes), cfg.Group).Scan(&n); err != nil {
			return fmt.Errorf("copying from %s into %s: %w", src, cfg.Table, err)
		}
		rep.Copied += n
		cfg.Logger.Debug("batch copied", "upTo", uuid.UUID(last.Bytes).String(), "inserted", n)
		from, op = uuid.UUID(last.Bytes), ">"
	}
}

// verify counts the eligible legacy rows that have no dedup row, and fails
// when there are any.
func verify(ctx context.Context, q querier, cfg Config, src source, rs []dedup.KeyRange, rep *Report) error {
	if err := countMissing(ctx, q, cfg, src, rs, rep); err != nil {
		return err
	}
	if rep.Missing > 0 {
		return fmt.Errorf("verifying the copy: %d eligible rows of %s are missing from %s (a partition dropped meanwhile?); run again", rep.Missing, src, cfg.Table)
	}
	return nil
}

// countMissing sets the report's Missing (and Counted): the eligible legacy
// rows without a dedup row.
func countMissing(ctx context.Context, q querier, cfg Config, src source, rs []dedup.KeyRange, rep *Report) error {
	match := "t.event_id = c.id"
	if cfg.Table.Scope == dedup.ScopeConsumerGroup {
		match += " AND t.consumer_group = c.grp"
	}
	sql := fmt.Sprintf(`SELECT pg_catalog.count(*) FROM (%s) c WHERE c.reason IS NULL AND NOT EXISTS (SELECT 1 FROM %s t WHERE %s)`,
		classify(src), pgx.Identifier{cfg.Table.Schema, cfg.Table.Name}.Sanitize(), match)
	if err := q.QueryRow(ctx, sql, classifyArgs(cfg, rs)...).Scan(&rep.Missing); err != nil {
		return fmt.Errorf("verifying the copy: %w", err)
	}
	rep.Counted = true
	return nil
}

// checkDrops refuses, unless Config.ConfirmPartitionDrop, partitions the
// retention would drop that hold rows (migrated ones, or the consumers').
func checkDrops(ctx context.Context, q querier, cfg Config, drop []dedup.Partition) error {
	if cfg.ConfirmPartitionDrop || len(drop) == 0 {
		return nil
	}
	var (
		full []string
		rows int64
	)
	for _, p := range drop {
		var n int64
		if err := q.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+pgx.Identifier{cfg.Table.Schema, p.Name}.Sanitize()).Scan(&n); err != nil {
			return fmt.Errorf("counting the rows of partition %s: %w", p.Name, err)
		}
		if n > 0 {
			full, rows = append(full, p.Name), rows+n
		}
	}
	if len(full) == 0 {
		return nil
	}
	return fmt.Errorf("refusing to drop %d partition(s) of %s holding %d rows (%s): retention %s ends after them, and an existing table is used as it is; "+
		"run with the retention of the IdempotentConsumer's spec.dedup.retention (the one used before), or, if these rows are meant to go (they are older than that retention), "+
		"confirm with ConfirmPartitionDrop (--confirm-partition-drop)",
		len(full), cfg.Table, rows, strings.Join(full, ", "), cfg.Retention)
}

// writeSkipped writes the rows not copied as CSV.
func writeSkipped(ctx context.Context, q querier, cfg Config, src source, rs []dedup.KeyRange, w io.Writer) error {
	rows, err := q.Query(ctx, `SELECT coalesce(id::text, ''), grp, at, reason FROM (`+classify(src)+`) c WHERE reason IS NOT NULL ORDER BY reason, id`,
		classifyArgs(cfg, rs)...)
	if err != nil {
		return fmt.Errorf("listing skipped rows: %w", err)
	}
	defer rows.Close()
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"event_id", "consumer_group", "processed_at", "reason"}); err != nil {
		return err
	}
	for rows.Next() {
		var (
			id, reason string
			grp        *string
			at         time.Time
		)
		if err := rows.Scan(&id, &grp, &at, &reason); err != nil {
			return fmt.Errorf("listing skipped rows: %w", err)
		}
		g := ""
		if grp != nil {
			g = *grp
		}
		if err := cw.Write([]string{id, g, at.UTC().Format(time.RFC3339Nano), reason}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("listing skipped rows: %w", err)
	}
	cw.Flush()
	return cw.Error()
}
