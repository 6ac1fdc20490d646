/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TableStore is the reconciler's narrow view of one processed_event table:
// everything it does to PostgreSQL goes through these calls. The real
// implementation is a *dedup.Engine; tests may wrap it to count or fail calls.
type TableStore interface {
	// EnsureTable creates the schema, table and ownership marker, or checks
	// an existing table's marker (*dedup.OwnershipError) and layout
	// (*dedup.LayoutError).
	EnsureTable(ctx context.Context, owner string) error
	// Adopt is EnsureTable for owner that also accepts a table whose marker
	// names from (spec.database.adoptFromUID), and rewrites its markers and
	// its partitions' to name owner.
	Adopt(ctx context.Context, owner, from string) (dedup.AdoptResult, error)
	// Observe reads the table and its partitions from pg_catalog.
	Observe(ctx context.Context) (dedup.State, error)
	// Maintain premakes and drops partitions as planned for now.
	Maintain(ctx context.Context, now time.Time, premake int, retention time.Duration) (dedup.Result, error)
	// DropTable drops the table if its marker names owner.
	DropTable(ctx context.Context, owner string) error
	// Durability reads synchronous_commit and the standbys, for the
	// DatabaseDurable condition.
	Durability(ctx context.Context) (dedup.Durability, error)
	// GrantConsumer gives the consumer's own role what the runtime of
	// group needs on the table (spec.database.consumerURLSecretRef).
	GrantConsumer(ctx context.Context, role, group string) (dedup.GrantResult, error)
	// RevokeConsumer takes back what GrantConsumer gave role for group.
	RevokeConsumer(ctx context.Context, role, group string) (dedup.GrantResult, error)
}

// StoreOpener returns the TableStore for a table in the database a
// connection points at. Opening sends no SQL; connection failures show up
// on the first call.
type StoreOpener interface {
	Open(ctx context.Context, db DatabaseConn, t dedup.Table) (TableStore, error)
}

// PoolOptions tune the connection pools of a PoolCache.
type PoolOptions struct {
	// MaxConns per pool; default DefaultDatabaseMaxConns. Every IdempotentConsumer that shares a
	// connection URL shares one pool.
	MaxConns int32
	// ConnectTimeout bounds one connection attempt; default 5s.
	ConnectTimeout time.Duration
	// IdleTimeout closes a pool that no reconcile used for this long; default 10m.
	IdleTimeout time.Duration
	// EngineOptions are passed to every dedup.Engine.
	EngineOptions []dedup.Option
}

// PoolCache is the StoreOpener the manager uses: one pgxpool per distinct
// connection URL and CA (keyed by their SHA-256, so the URL itself is not
// kept as a map key), shared by every object using them, and closed when
// unused.
type PoolCache struct {
	opts  PoolOptions
	mu    sync.Mutex
	pools map[[32]byte]*cachedPool
}

type cachedPool struct {
	pool     *pgxpool.Pool
	lastUsed time.Time
}

// NewPoolCache returns an empty cache.
func NewPoolCache(opts PoolOptions) *PoolCache {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultDatabaseMaxConns
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	return &PoolCache{opts: opts, pools: map[[32]byte]*cachedPool{}}
}

// Open implements StoreOpener. A URL that does not parse returns an
// *InvalidURLError, one whose TLS settings contradict the CA a
// *DatabaseTLSError; neither contains the URL.
func (c *PoolCache) Open(_ context.Context, db DatabaseConn, t dedup.Table) (TableStore, error) {
	pool, err := c.pool(db)
	if err != nil {
		return nil, err
	}
	// The reconcile runs Maintain right after EnsureTable, ahead of now by
	// its lead and with the object's policy: the first partitions are its.
	return dedup.NewEngine(pool, t, append([]dedup.Option{dedup.WithoutFirstPartitions()}, c.opts.EngineOptions...)...)
}

func (c *PoolCache) pool(db DatabaseConn) (*pgxpool.Pool, error) {
	h := sha256.New()
	h.Write([]byte(db.URL))
	h.Write([]byte{0})
	h.Write(db.CA)
	var key [32]byte
	copy(key[:], h.Sum(nil))
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.pools {
		if k != key && now.Sub(p.lastUsed) > c.opts.IdleTimeout {
			p.pool.Close()
			delete(c.pools, k)
		}
	}
	if p, ok := c.pools[key]; ok {
		p.lastUsed = now
		return p.pool, nil
	}
	cfg, err := parsePoolConfig(db)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = c.opts.MaxConns
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > c.opts.ConnectTimeout {
		cfg.ConnConfig.ConnectTimeout = c.opts.ConnectTimeout
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "idempotency-operator"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("creating connection pool: %w", err)
	}
	c.pools[key] = &cachedPool{pool: pool, lastUsed: now}
	return pool, nil
}

// Close closes every pool.
func (c *PoolCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.pools {
		p.pool.Close()
		delete(c.pools, k)
	}
}

// Len is the number of open pools.
func (c *PoolCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pools)
}

// InvalidURLError is a database URL that does not parse. It deliberately
// carries no part of the URL.
type InvalidURLError struct{}

func (*InvalidURLError) Error() string {
	return "the database URL does not parse as a PostgreSQL connection string (postgres://user:password@host:5432/dbname?sslmode=...)"
}
