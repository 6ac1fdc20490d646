// Command outboxproducer is the chaos run's producer service of the outbox
// chain (hack/chaos/outbox.go): a service that writes business rows and their
// events in one transaction, as docs/outbox.md tells a service to, while the
// harness kill -9s it.
//
// It loops: BEGIN; take the order key's lock (a transaction advisory lock on
// the key, so that transactions of one key are serialised and seq is the
// key's commit order); for one or two orders: seq = the key's last committed
// seq + 1, emit an OrderPlaced event (outbox.Emit: the <table>_emit SQL
// function) keyed by the order key with a payload of (key, seq, uid), and
// insert the business row (key, seq, uid, event_id); then, on purpose,
// ROLLBACK a share of the transactions (their uids appended to the rollback
// file after the rollback returned), and COMMIT the rest. A failure (the
// database restarting) rolls the transaction back and the loop goes on.
//
// The environment:
//
//	OUTBOX_DATABASE_URL     PostgreSQL
//	OUTBOX_TABLE            the outbox table (public schema)
//	OUTBOX_TOPIC            the events' topic
//	OUTBOX_ORDERS_TABLE     the business table (key text, seq int, uid uuid, event_id uuid)
//	OUTBOX_KEYS             how many order keys (order-0 ... order-N-1) the producers share
//	OUTBOX_ROLLBACK_SHARE   share of the transactions rolled back on purpose
//	OUTBOX_ROLLBACK_FILE    where the rolled-back uids are appended, one a line
//	OUTBOX_PAUSE_MAX        the most it sleeps between transactions (and inside one, before its end)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/outbox"
)

// orderLockClass is the first half of the business key's advisory lock.
const orderLockClass = 7

type config struct {
	dbURL, topic, orders, rollbackFile string
	table                              outbox.Table
	keys                               int
	rollbackShare                      float64
	pauseMax                           time.Duration
}

// Payload is the event's value; hack/chaos decodes the same fields.
type Payload struct {
	Key string    `json:"key"`
	Seq int       `json:"seq"`
	UID uuid.UUID `json:"uid"`
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	c := config{
		dbURL:        os.Getenv("OUTBOX_DATABASE_URL"),
		topic:        os.Getenv("OUTBOX_TOPIC"),
		orders:       os.Getenv("OUTBOX_ORDERS_TABLE"),
		rollbackFile: os.Getenv("OUTBOX_ROLLBACK_FILE"),
		table:        outbox.Table{Name: os.Getenv("OUTBOX_TABLE")},
	}
	var err error
	if c.keys, err = strconv.Atoi(os.Getenv("OUTBOX_KEYS")); err != nil || c.keys <= 0 {
		log.Fatal("outboxproducer: OUTBOX_KEYS must be a positive number")
	}
	if c.rollbackShare, err = strconv.ParseFloat(os.Getenv("OUTBOX_ROLLBACK_SHARE"), 64); err != nil {
		log.Fatal("outboxproducer: OUTBOX_ROLLBACK_SHARE must be a number")
	}
	if c.pauseMax, err = time.ParseDuration(os.Getenv("OUTBOX_PAUSE_MAX")); err != nil || c.pauseMax <= 0 {
		log.Fatal("outboxproducer: OUTBOX_PAUSE_MAX must be a positive duration")
	}
	if c.dbURL == "" || c.topic == "" || c.orders == "" || c.rollbackFile == "" || c.table.Name == "" {
		log.Fatal("outboxproducer: OUTBOX_DATABASE_URL, OUTBOX_TABLE, OUTBOX_TOPIC, OUTBOX_ORDERS_TABLE and OUTBOX_ROLLBACK_FILE are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil && ctx.Err() == nil {
		log.Fatalf("outboxproducer: %v", err)
	}
	log.Print("outboxproducer: stopped")
}

func run(ctx context.Context, c config) error {
	pool, err := pgxpool.New(ctx, c.dbURL)
	if err != nil {
		return fmt.Errorf("opening the database pool: %w", err)
	}
	defer pool.Close()
	rb, err := os.OpenFile(c.rollbackFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer rb.Close()
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid()))) //nolint:gosec // G404: a test workload
	var committed, rolledBack, failed int
	for ctx.Err() == nil {
		key := "order-" + strconv.Itoa(rng.IntN(c.keys))
		n := 1 + rng.IntN(2)
		rollback := rng.Float64() < c.rollbackShare
		uids, err := one(ctx, pool, c, rng, key, n, rollback)
		switch {
		case err != nil:
			failed++
			if ctx.Err() == nil {
				log.Printf("outboxproducer: transaction on %s failed (rolled back): %v", key, err)
				time.Sleep(100 * time.Millisecond)
			}
		case rollback:
			rolledBack++
			for _, u := range uids {
				if _, err := fmt.Fprintln(rb, u); err != nil {
					return err
				}
			}
		default:
			committed++
		}
		if (committed+rolledBack+failed)%200 == 0 {
			log.Printf("outboxproducer: %d committed, %d rolled back on purpose, %d failed", committed, rolledBack, failed)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(c.pauseMax))))
	}
	return nil
}

// one runs one transaction of n orders on key; it returns their uids.
func one(ctx context.Context, pool *pgxpool.Pool, c config, rng *mrand.Rand, key string, n int, rollback bool) ([]uuid.UUID, error) {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := pool.Begin(tctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(tctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, orderLockClass, key); err != nil {
		return nil, err
	}
	var seq int
	if err := tx.QueryRow(tctx, `SELECT coalesce(max(seq), 0) FROM `+pgx.Identifier{c.orders}.Sanitize()+` WHERE key = $1`, key).Scan(&seq); err != nil {
		return nil, err
	}
	var uids []uuid.UUID
	for range n {
		seq++
		p := Payload{Key: key, Seq: seq, UID: uuid.New()}
		body, _ := json.Marshal(p)
		id, err := outbox.Emit(tctx, tx, c.table, outbox.Message{Topic: c.topic, Key: []byte(key), Payload: body,
			Headers: map[string]string{"type": "OrderPlaced"}})
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(tctx, `INSERT INTO `+pgx.Identifier{c.orders}.Sanitize()+` (key, seq, uid, event_id) VALUES ($1, $2, $3, $4)`,
			key, seq, p.UID, id); err != nil {
			return nil, err
		}
		uids = append(uids, p.UID)
	}
	// A moment inside the transaction, so that kills land there too.
	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.Int64N(int64(c.pauseMax))))
	}
	if rollback {
		return uids, tx.Rollback(tctx)
	}
	return uids, tx.Commit(tctx)
}
