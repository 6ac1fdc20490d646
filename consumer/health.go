package consumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idempotency-dev/operator/consumer/internal/redact"
	"github.com/idempotency-dev/operator/consumer/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsNamespace prefixes every metric name.
const MetricsNamespace = telemetry.Namespace

// Ready reports nil when the consumer is in a group generation, its database
// answers, and its last broker and database operations succeeded; otherwise
// why not. Unless a batch committed in the last few seconds it pings the
// database (1s timeout), so that an outage shows even while no events arrive;
// while batches are committing it doesn't, so a busy pool can't make it flap.
func (c *Consumer) Ready(ctx context.Context) error {
	if err := c.health.Ready(); err != nil {
		return err
	}
	if c.health.DBRecentlyOK(5 * time.Second) {
		return nil
	}
	c.mu.Lock()
	pool := c.pool
	c.mu.Unlock()
	if pool == nil {
		return errors.New("database pool not open")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", redact.Err(err, c.secrets...))
	}
	return nil
}

// Handler serves /healthz (200 while Run is running), /readyz (200 when
// Ready, else 503 with the reason) and /metrics (Prometheus).
func (c *Consumer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !c.health.Alive() {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(c.gatherer, promhttp.HandlerOpts{}))
	return mux
}
