package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer"
)

// TestEndToEndHistogram: every record's outcome, whichever the pipeline,
// is observed in idempotent_consumer_end_to_end_seconds once it is
// durable (duplicates and dead letters included).
func TestEndToEndHistogram(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(fmt.Sprintf("external=%t", external), func(t *testing.T) {
			e := newEnv(t)
			e.dumpLogsOnFailure(t)
			reg := prometheus.NewRegistry()
			cfg := e.config(func(c *consumer.Config) { c.Registerer, c.Gatherer = reg, reg })
			var r *running
			if external {
				r = e.startExternal(cfg, newXRecorder(t, 0).handle)
			} else {
				r = e.start(cfg, nil)
			}
			defer func() { _ = r.stop(t) }()
			ids := produceIDs(t, e, 5)
			e.kafka.Produce(t, e.topic, event(ids[0], 0, "")) // a duplicate
			e.kafka.Produce(t, e.topic, kafka.Message{Value: []byte("not json")})
			waitFor(t, 30*time.Second, "7 outcomes observed", func() (bool, string) {
				n, err := testutil.GatherAndCount(reg, "idempotent_consumer_end_to_end_seconds")
				if err != nil {
					return false, err.Error()
				}
				count := histogramCount(t, reg)
				return n == 1 && count == 7, fmt.Sprintf("%d series, %d observations", n, count)
			})
		})
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "idempotent_consumer_end_to_end_seconds" {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	return 0
}
