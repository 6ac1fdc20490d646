package sink

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer"
)

// Log returns a handler that logs each new event's id, type and position
// (never its payload) at info level. For trying the consumer out.
func Log(log *slog.Logger) consumer.Handler {
	return func(ctx context.Context, _ pgx.Tx, ev *consumer.Event) error {
		log.InfoContext(ctx, "event", "eventId", ev.ID, "type", ev.Type, "topic", ev.Topic,
			"partition", ev.Partition, "offset", ev.Offset, "bytes", len(ev.Payload))
		return nil
	}
}

// None returns a handler that does nothing: events are only recorded in the
// dedup table. For benchmarks and dry runs.
func None() consumer.Handler {
	return func(context.Context, pgx.Tx, *consumer.Event) error { return nil }
}
