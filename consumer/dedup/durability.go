package dedup

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Durability is what the database server says about how durable a committed
// transaction is: the settings that decide whether a commit waits for the
// local WAL flush and for a standby, and the standbys streaming from it.
type Durability struct {
	// SynchronousCommit is the session's synchronous_commit: on, off,
	// local, remote_write or remote_apply.
	SynchronousCommit string
	// SynchronousStandbyNames is the server's synchronous_standby_names;
	// empty: every standby is asynchronous.
	SynchronousStandbyNames string
	// Standbys are the rows of pg_stat_replication (one per walsender to a
	// standby). Without the pg_read_all_stats privilege (pg_monitor has it)
	// PostgreSQL shows only their number: Name and SyncState are then empty.
	Standbys []Standby
}

// Standby is one standby streaming from the server.
type Standby struct {
	Name      string // application_name; "" when not visible
	SyncState string // async, potential, sync or quorum; "" when not visible
}

// Risk is one way a committed batch can be lost by the database, with a
// reason in CamelCase (for a condition or a metric label) and a message.
type Risk struct {
	Reason  string
	Message string
}

// The reasons Durability.Risks reports.
const (
	// RiskSynchronousCommitOff: commits return before their WAL is flushed;
	// a server crash loses the last ones (up to three times wal_writer_delay).
	RiskSynchronousCommitOff = "SynchronousCommitOff"
	// RiskAsyncStandby: a standby receives the WAL after the commit
	// returned; a failover to it loses what it had not received.
	RiskAsyncStandby = "AsynchronousStandby"
)

// ReadDurability reads synchronous_commit, synchronous_standby_names and
// pg_stat_replication over q (a pool, a connection or a transaction). It
// needs no privilege beyond connecting; with pg_read_all_stats it also names
// the standbys and their sync state.
func ReadDurability(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (Durability, error) {
	var (
		d            Durability
		names, syncs []string
		visible      []bool
	)
	// application_name is shown to an unprivileged role only for its own
	// walsenders; sync_state is NULL unless the role may read all stats.
	err := q.QueryRow(ctx, `
SELECT pg_catalog.current_setting('synchronous_commit'), pg_catalog.current_setting('synchronous_standby_names'),
       coalesce(pg_catalog.array_agg(coalesce(application_name, '') ORDER BY pid) FILTER (WHERE pid IS NOT NULL), '{}'),
       coalesce(pg_catalog.array_agg(coalesce(sync_state, '') ORDER BY pid) FILTER (WHERE pid IS NOT NULL), '{}'),
       coalesce(pg_catalog.array_agg(sync_state IS NOT NULL ORDER BY pid) FILTER (WHERE pid IS NOT NULL), '{}')
  FROM (SELECT 1) one LEFT JOIN pg_stat_replication ON true`).Scan(&d.SynchronousCommit, &d.SynchronousStandbyNames, &names, &syncs, &visible)
	if err != nil {
		return d, fmt.Errorf("reading synchronous_commit and pg_stat_replication: %w", err)
	}
	for i := range names {
		s := Standby{SyncState: syncs[i]}
		if visible[i] {
			s.Name = names[i]
		}
		d.Standbys = append(d.Standbys, s)
	}
	return d, nil
}

// Risks lists how a commit acknowledged to the consumer can still be lost:
// synchronous_commit off (lost in a crash), and standbys a commit does not
// wait for (lost in a failover to one of them): every standby when
// synchronous_standby_names is empty or synchronous_commit is local or off,
// otherwise those whose sync_state is async or potential. None: a commit
// survives a crash and a failover to any standby the server lists.
//
// With the runtime's positions table such a loss is redone from Kafka on the
// next batch or assignment, as long as the topic still holds the records;
// without it (or for records Kafka no longer holds) it is permanent.
func (d Durability) Risks() []Risk {
	var out []Risk
	sc := strings.ToLower(d.SynchronousCommit)
	if sc == "off" {
		out = append(out, Risk{RiskSynchronousCommitOff,
			"synchronous_commit is off: a commit returns before its WAL is flushed, and a server crash loses the last commits"})
	}
	var async []string
	for _, s := range d.Standbys {
		waits := d.SynchronousStandbyNames != "" && sc != "off" && sc != "local" &&
			(s.SyncState == "" || s.SyncState == "sync" || s.SyncState == "quorum")
		if !waits {
			name := s.Name
			if name == "" {
				name = "(unnamed)"
			}
			async = append(async, name)
		}
	}
	if len(async) > 0 {
		why := "synchronous_standby_names is empty"
		switch {
		case d.SynchronousStandbyNames == "":
		case sc == "off" || sc == "local":
			why = "synchronous_commit is " + sc
		default:
			why = "their sync_state is async or potential"
		}
		out = append(out, Risk{RiskAsyncStandby, fmt.Sprintf(
			"%d standby(s) replicate asynchronously (%s; %s): a commit returns before they have it, and a failover to one loses the commits it had not received",
			len(async), strings.Join(async, ", "), why)})
	}
	return out
}

// Durability is ReadDurability over the engine's pool, under its statement
// bound: for the operator's status. synchronous_commit is then the operator's
// role's; a consumer whose role sets another reports its own at start-up.
func (e *Engine) Durability(ctx context.Context) (Durability, error) {
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	return ReadDurability(ctx, e.pool)
}
