package migrate

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// Run migrates the legacy table into the partitioned table; see the package
// documentation. It is safe to run again: done steps are skipped and rows
// already copied are left alone.
//
// The phases, in order: find the legacy table and its columns; check the
// new table's owner and the partitions the retention would drop, before
// changing anything; rename the legacy table out of the way; create the
// partitioned table and its partitions; install (or look for) the sync
// trigger; count, copy and verify the rows.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	eng, err := dedup.NewEngine(pool, cfg.Table, dedup.WithoutFirstPartitions()) // its Maintain follows, with cfg's policy
	if err != nil {
		return nil, err
	}
	r := &run{pool: pool, cfg: cfg, eng: eng, now: cfg.Now(),
		rep: &Report{DryRun: cfg.DryRun, Target: cfg.Table.String(), Skipped: map[string]int64{}, Samples: map[string][]string{}}}
	phases := []func(context.Context) error{r.findSource, r.checkTarget, r.renameSource, r.prepareTarget, r.syncTrigger, r.countRows}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			return nil, err
		}
	}
	return r.rep, r.copyRows(ctx)
}

// run is one Run's state, handed from phase to phase.
type run struct {
	pool *pgxpool.Pool
	cfg  Config
	eng  *dedup.Engine
	now  time.Time
	rep  *Report

	src    source           // the legacy table (after the rename)
	rename bool             // the legacy table has the new table's name: rename it
	st     dedup.State      // the new table before the run (zero when it is to be created)
	owner  string           // the owner for the new table's marker
	rs     []dedup.KeyRange // the id ranges the partitions accept, to copy
}

// findSource finds the legacy table and resolves its columns.
func (r *run) findSource(ctx context.Context) error {
	var err error
	if r.src, r.rename, err = locate(ctx, r.pool, r.cfg); err != nil {
		return err
	}
	hasIndex, err := columns(ctx, r.pool, r.cfg, &r.src)
	if err != nil {
		return err
	}
	if !hasIndex {
		r.cfg.Logger.Warn("the legacy id column leads no index: every batch scans the whole table", "table", r.src.String())
	}
	return nil
}

// checkTarget checks the new table's owner before anything changes. An
// existing table is used as it is: partitions the retention would drop are
// dropped only when they are empty or the drop is confirmed.
func (r *run) checkTarget(ctx context.Context) error {
	cfg := r.cfg
	if !r.rename { // else the legacy table still has the name: the table is to be created
		var err error
		if r.st, err = r.eng.Observe(ctx); err != nil {
			return err
		}
	}
	r.owner = cfg.Owner
	if r.owner == "" {
		r.owner = r.st.Owner
	}
	switch {
	case r.st.Exists && (r.st.Owner == "" || cfg.Owner != "" && r.st.Owner != cfg.Owner):
		return &dedup.OwnershipError{Table: cfg.Table.String(), Owner: r.st.Owner}
	case !r.st.Exists && r.owner == "":
		return fmt.Errorf("creating %s needs the owner: the IdempotentConsumer's metadata.uid (kubectl get ic NAME -o jsonpath='{.metadata.uid}')", cfg.Table)
	}
	if !r.st.Exists {
		return nil
	}
	drop := cfg.policy().Plan(r.now, cfg.Table.Name, r.st.Partitions).Drop
	for _, p := range drop {
		r.rep.PartitionsDropped = append(r.rep.PartitionsDropped, p.Name)
	}
	return checkDrops(ctx, r.pool, cfg, drop)
}

// renameSource renames the legacy table (and its indexes) out of the new
// table's way, when it has the new table's name.
func (r *run) renameSource(ctx context.Context) error {
	cfg := r.cfg
	if !r.rename {
		r.rep.Source = r.src.String()
		return nil
	}
	r.rep.Renamed = true
	newIdx, err := renamedIndexes(ctx, r.pool, r.src, cfg.RenameTo)
	if err != nil {
		return err
	}
	for _, ix := range newIdx {
		r.rep.RenamedIndexes = append(r.rep.RenamedIndexes, ix.from+" -> "+ix.to)
	}
	if !cfg.DryRun {
		if err := renameLegacy(ctx, r.pool, cfg, r.src, newIdx); err != nil {
			return err
		}
		cfg.Logger.Info("renamed the legacy table", "from", r.src.String(), "to", cfg.LegacySchema+"."+cfg.RenameTo)
		r.src.name = cfg.RenameTo
	}
	r.rep.Source = cfg.LegacySchema + "." + cfg.RenameTo
	return nil
}

// prepareTarget creates the partitioned table and its partitions (a dry run
// plans them) and sets the ranges to copy and the report's window.
func (r *run) prepareTarget(ctx context.Context) error {
	cfg, rep := r.cfg, r.rep
	rep.Created = !r.st.Exists
	var parts []dedup.ObservedPartition
	if cfg.DryRun {
		plan := cfg.policy().Plan(r.now, cfg.Table.Name, r.st.Partitions)
		parts = slices.DeleteFunc(slices.Clone(r.st.Partitions), func(p dedup.ObservedPartition) bool {
			return slices.ContainsFunc(plan.Drop, func(d dedup.Partition) bool { return d.Name == p.Name })
		})
		for _, p := range plan.Create {
			lo, hi := p.Bounds()
			parts = append(parts, dedup.ObservedPartition{Name: p.Name, From: lo, To: hi})
			rep.PartitionsCreated = append(rep.PartitionsCreated, p.Name)
		}
	} else {
		if err := r.eng.EnsureTable(ctx, r.owner); err != nil {
			return err
		}
		res, err := r.eng.Maintain(ctx, r.now, cfg.Premake, cfg.Retention)
		if err != nil {
			return err
		}
		for _, p := range res.Created {
			rep.PartitionsCreated = append(rep.PartitionsCreated, p.Name)
		}
		rep.PartitionsDropped = nil
		for _, p := range res.Dropped {
			rep.PartitionsDropped = append(rep.PartitionsDropped, p.Name)
		}
		if r.st, err = r.eng.Observe(ctx); err != nil {
			return err
		}
		parts = r.st.Partitions
		cfg.Logger.Info("partitioned table ready", "table", rep.Target, "created", rep.Created, "partitionsCreated", len(res.Created))
	}
	if r.rs = dedup.Ranges(parts); len(r.rs) == 0 {
		return fmt.Errorf("%s has no partitions to copy into", cfg.Table)
	}
	rep.Window = dedup.WindowOf(parts)
	return nil
}

// syncTrigger installs the sync trigger when asked to, and otherwise reports
// one an earlier run left.
func (r *run) syncTrigger(ctx context.Context) error {
	cfg, src := r.cfg, r.src
	if cfg.SyncTrigger {
		r.rep.SyncTrigger = SyncTriggerName
		if cfg.DryRun {
			return nil
		}
		if err := installSyncTrigger(ctx, r.pool, cfg, src); err != nil {
			return err
		}
		cfg.Logger.Info("sync trigger installed", "trigger", SyncTriggerName, "table", src.String())
		return nil
	}
	left, err := hasSyncTrigger(ctx, r.pool, src)
	if err != nil {
		return err
	}
	if left {
		r.rep.LeftoverSyncTrigger = SyncTriggerName
		cfg.Logger.Warn("the sync trigger of an earlier run is still installed; remove it with --remove-sync-trigger once nothing writes the legacy table",
			"trigger", SyncTriggerName, "table", src.String())
	}
	return nil
}

// countRows fills the report's totals and samples of the legacy rows.
func (r *run) countRows(ctx context.Context) error {
	return count(ctx, r.pool, r.cfg, r.src, r.rs, r.rep)
}

// copyRows copies the eligible rows range by range and verifies the copy,
// then writes the skipped rows (a dry run does neither). An interrupted copy
// still reports what the new table holds; from here on the report is
// returned with the error.
func (r *run) copyRows(ctx context.Context) error {
	cfg, src, rs, rep := r.cfg, r.src, r.rs, r.rep
	if !cfg.DryRun {
		for _, kr := range rs {
			if err := copyRange(ctx, r.pool, cfg, src, kr, rep); err != nil {
				r.countInterrupted(ctx)
				return err
			}
		}
		if err := verify(ctx, r.pool, cfg, src, rs, rep); err != nil {
			return err
		}
		cfg.Logger.Info("copy done", "eligible", rep.Eligible, "copied", rep.Copied, "skipped", rep.SkippedTotal(), "missing", rep.Missing)
	}
	if cfg.Skipped != nil && !cfg.DryRun {
		return writeSkipped(ctx, r.pool, cfg, src, rs, cfg.Skipped)
	}
	return nil
}

// countInterrupted marks the report interrupted and says what the table
// holds now, not what a finished copy would have: it counts on a context of
// its own, as ctx may be the one that was cancelled.
func (r *run) countInterrupted(ctx context.Context) {
	r.rep.Interrupted = true
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptedCountTimeout)
	defer cancel()
	if err := countMissing(cctx, r.pool, r.cfg, r.src, r.rs, r.rep); err != nil {
		r.cfg.Logger.Warn("counting the rows copied before the interruption", "error", err)
	}
}
