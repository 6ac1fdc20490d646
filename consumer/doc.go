// Package consumer is a Kafka consumer runtime that gives handlers an
// exactly-once effect on top of Kafka's at-least-once delivery.
//
// Every event carries a UUID v7 event id (the JSON "eventId" field, or the
// CloudEvents ce_id header). Per Kafka partition the runtime takes a batch of
// records, and in one PostgreSQL transaction records all their ids in the
// dedup table (consumer/dedup) and calls the Handler only for ids seen for the
// first time, each under a savepoint. It commits the transaction, writes any
// dead letters (acks=all), and only then commits the Kafka offset. A crash or
// rebalance between the two commits redelivers the batch, and the dedup rows
// make the redelivery a no-op.
//
//	c, err := consumer.New(consumer.Config{
//		Brokers: []string{"kafka:9092"}, Topic: "payments", Group: "ledger",
//		DatabaseURL: os.Getenv("DATABASE_URL"),
//	}, func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
//		_, err := tx.Exec(ctx, "INSERT INTO ledger (event_id, body) VALUES ($1, $2)", ev.ID, ev.Payload)
//		return err
//	})
//	...
//	err = c.Run(ctx) // until ctx is done; c.Handler() serves /healthz /readyz /metrics
//
// Records that can't be processed get a Reason (not_json, missing_id,
// invalid_uuid, wrong_uuid_version, oversized, outside_window, handler_failed)
// and that reason's Policy: dead-letter (the default), skip, or stop.
// Database and broker outages are never dead-lettered: the runtime pauses,
// reports not ready and retries, and commits nothing meanwhile.
//
// The package imports no Kubernetes code; docs/consumer.md is its reference.
package consumer
