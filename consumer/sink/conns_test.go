package sink_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestHTTPReusesConnectionsAtMaxInFlight: with the default transport, rounds
// of 64 concurrent requests (the runtime's default MaxInFlight) reuse their
// connections instead of opening new ones for all but two of them each time
// (http.DefaultTransport keeps 2 idle connections per host).
func TestHTTPReusesConnectionsAtMaxInFlight(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	post, err := sink.HTTPExternal(sink.HTTPConfig{URL: srv.URL + "/charge"})
	if err != nil {
		t.Fatal(err)
	}
	const inFlight, rounds = consumer.DefaultMaxInFlight, 4
	for range rounds {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ev := &consumer.Event{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{}`)}
				if err := post(consumer.ContextWithEvent(context.Background(), ev), ev); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	// Each round may open a few connections while earlier ones are being
	// returned; without reuse it opens about inFlight-2.
	if n := conns.Load(); n > inFlight+inFlight/2 {
		t.Fatalf("%d connections for %d rounds of %d concurrent requests; want at most %d", n, rounds, inFlight, inFlight+inFlight/2)
	}
	t.Logf("%d connections for %d rounds of %d concurrent requests", conns.Load(), rounds, inFlight)
}
