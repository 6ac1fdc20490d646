package outbox_test

import (
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/outbox"
)

// TestUnpublished: what the operator reads to retire a topic. A writer still
// open below the horizon (until) holds the snapshot's xmin below it, so its
// row, not yet visible, cannot be missed; once committed, the row is
// pending until a relay publishes it; another topic's rows do not count.
// (A snapshot's xmax as the horizon failed the first check: the open
// writer's id was not below it.)
func TestUnpublished(t *testing.T) {
	e := newRelayEnv(t)
	ctx := testCtx(t)
	e.kafka.MustCreateTopic(t, "retiring", 1)
	e.kafka.MustCreateTopic(t, "other", 1)

	open := e.beginWithXid(t)
	if _, err := outbox.Emit(ctx, open, e.tbl, outbox.Message{Topic: "retiring", Key: []byte("k"), Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	until, err := outbox.Horizon(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	check := func(wantPending, wantPast bool, when string) {
		t.Helper()
		pending, xmin, err := outbox.Unpublished(ctx, e.pool, e.tbl, "retiring")
		if err != nil {
			t.Fatal(err)
		}
		if pending != wantPending || (xmin >= until) != wantPast {
			t.Errorf("%s: pending %v, xmin %d (until %d): want pending %v, xmin past until %v", when, pending, xmin, until, wantPending, wantPast)
		}
	}
	check(false, false, "the writer open")
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.emit(t, "other", "k", []byte(`{}`))
	check(true, true, "committed, no relay")

	e.start(t, nil)
	waitFor(t, 30*time.Second, "the retiring topic's row published", func() bool {
		pending, xmin, err := outbox.Unpublished(ctx, e.pool, e.tbl, "retiring")
		return err == nil && !pending && xmin >= until
	})
	if got := e.readTopic(t, "retiring", 1, 1, 10*time.Second); len(got) != 1 {
		t.Errorf("retiring holds %d records, want 1", len(got))
	}
}
