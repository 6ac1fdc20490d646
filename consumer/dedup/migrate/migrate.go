package migrate

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// Run migrates the legacy table into the partitioned table; see the package
// documentation. It is safe to run again: done steps are skipped and rows
// already copied are left alone.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	eng, err := dedup.NewEngine(pool, cfg.Table)
	if err != nil {
		return nil, err
	}
	rep := &Report{DryRun: cfg.DryRun, Target: cfg.Table.String(), Skipped: map[string]int64{}, Samples: map[string][]string{}}

	src, rename, err := locate(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	hasIndex, err := columns(ctx, pool, cfg, &src)
	if err != nil {
		return nil, err
	}
	if !hasIndex {
		log.Warn("the legacy id column leads no index: every batch scans the whole table", "table", src.String())
	}

	// Check the owner before changing anything.
	var st dedup.State
	if !rename { // else the legacy table still has the name: the table is to be created
		if st, err = eng.Observe(ctx); err != nil {
			return nil, err
		}
	}
	owner := cfg.Owner
	if owner == "" {
		owner = st.Owner
	}
	switch {
	case st.Exists && (st.Owner == "" || cfg.Owner != "" && st.Owner != cfg.Owner):
		return nil, &dedup.OwnershipError{Table: cfg.Table.String(), Owner: st.Owner}
	case !st.Exists && owner == "":
		return nil, fmt.Errorf("creating %s needs the owner: the IdempotentConsumer's metadata.uid (kubectl get ic NAME -o jsonpath='{.metadata.uid}')", cfg.Table)
	}
	// An existing table is used as it is: partitions the retention would
	// drop are dropped only when they are empty or the drop is confirmed.
	now := cfg.Now()
	if st.Exists {
		drop := dedup.PlanPartitions(now, cfg.Table.Interval, cfg.Premake, cfg.Retention, cfg.Table.Name, st.Partitions).Drop
		for _, p := range drop {
			rep.PartitionsDropped = append(rep.PartitionsDropped, p.Name)
		}
		if err := checkDrops(ctx, pool, cfg, drop); err != nil {
			return nil, err
		}
	}

	// Rename the legacy table (and its indexes) out of the new table's way.
	if rename {
		rep.Renamed = true
		newIdx, err := renamedIndexes(ctx, pool, src, cfg.RenameTo)
		if err != nil {
			return nil, err
		}
		for _, ix := range newIdx {
			rep.RenamedIndexes = append(rep.RenamedIndexes, ix.from+" -> "+ix.to)
		}
		if !cfg.DryRun {
			if err := renameLegacy(ctx, pool, cfg, src, newIdx); err != nil {
				return nil, err
			}
			log.Info("renamed the legacy table", "from", src.String(), "to", cfg.LegacySchema+"."+cfg.RenameTo)
			src.name = cfg.RenameTo
		}
		rep.Source = cfg.LegacySchema + "." + cfg.RenameTo
	} else {
		rep.Source = src.String()
	}

	// Create the partitioned table and its partitions.
	rep.Created = !st.Exists
	var rs []keyRange
	if cfg.DryRun {
		plan := dedup.PlanPartitions(now, cfg.Table.Interval, cfg.Premake, cfg.Retention, cfg.Table.Name, st.Partitions)
		after := slices.DeleteFunc(slices.Clone(st.Partitions), func(p dedup.ObservedPartition) bool {
			return slices.ContainsFunc(plan.Drop, func(d dedup.Partition) bool { return d.Name == p.Name })
		})
		for _, p := range plan.Create {
			lo, hi := p.Bounds()
			after = append(after, dedup.ObservedPartition{Name: p.Name, From: lo, To: hi})
			rep.PartitionsCreated = append(rep.PartitionsCreated, p.Name)
		}
		rs = ranges(after)
	} else {
		if err := eng.EnsureTable(ctx, owner); err != nil {
			return nil, err
		}
		res, err := eng.Maintain(ctx, now, cfg.Premake, cfg.Retention)
		if err != nil {
			return nil, err
		}
		for _, p := range res.Created {
			rep.PartitionsCreated = append(rep.PartitionsCreated, p.Name)
		}
		rep.PartitionsDropped = nil
		for _, p := range res.Dropped {
			rep.PartitionsDropped = append(rep.PartitionsDropped, p.Name)
		}
		if st, err = eng.Observe(ctx); err != nil {
			return nil, err
		}
		rs = ranges(st.Partitions)
		log.Info("partitioned table ready", "table", rep.Target, "created", rep.Created, "partitionsCreated", len(res.Created))
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s has no partitions to copy into", cfg.Table)
	}
	rep.Window = window(rs)

	if cfg.SyncTrigger {
		rep.SyncTrigger = SyncTriggerName
		if !cfg.DryRun {
			if err := installSyncTrigger(ctx, pool, cfg, src); err != nil {
				return nil, err
			}
			log.Info("sync trigger installed", "trigger", SyncTriggerName, "table", src.String())
		}
	} else {
		var left bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2)`,
			src.rel.oid, SyncTriggerName).Scan(&left); err != nil {
			return nil, fmt.Errorf("looking for a sync trigger on %s: %w", src, err)
		}
		if left {
			rep.LeftoverSyncTrigger = SyncTriggerName
			log.Warn("the sync trigger of an earlier run is still installed; remove it with --remove-sync-trigger once nothing writes the legacy table",
				"trigger", SyncTriggerName, "table", src.String())
		}
	}

	if err := count(ctx, pool, cfg, src, rs, rep); err != nil {
		return nil, err
	}
	if !cfg.DryRun {
		for _, r := range rs {
			if err := copyRange(ctx, pool, cfg, src, r, rep); err != nil {
				// Say what the table holds now, not what a finished copy
				// would have: count on a context of its own, as ctx may be
				// the one that was cancelled.
				rep.Interrupted = true
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptedCountTimeout)
				defer cancel()
				if cerr := countMissing(cctx, pool, cfg, src, rs, rep); cerr != nil {
					log.Warn("counting the rows copied before the interruption", "error", cerr)
				}
				return rep, err
			}
		}
		if err := verify(ctx, pool, cfg, src, rs, rep); err != nil {
			return rep, err
		}
		log.Info("copy done", "eligible", rep.Eligible, "copied", rep.Copied, "skipped", rep.SkippedTotal(), "missing", rep.Missing)
	}
	if cfg.Skipped != nil && !cfg.DryRun {
		if err := writeSkipped(ctx, pool, cfg, src, rs, cfg.Skipped); err != nil {
			return rep, err
		}
	}
	return rep, nil
}
