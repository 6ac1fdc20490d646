package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

func TestMain(m *testing.M) { consumertest.RunMain(m) }

// collector is an OTLP/gRPC trace endpoint that keeps what it receives.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu  sync.Mutex
	got []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestTracingExportsOverOTLP runs the binary's code with the HTTP sink and
// OTEL_EXPORTER_OTLP_ENDPOINT set: the collector receives the batch and
// handler spans under service.name = the group, flushed on exit, and the
// sink's request carries the handler span's context.
func TestTracingExportsOverOTLP(t *testing.T) {
	const producerTrace, producerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	// The exporter reads the process environment.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_SERVICE_NAME", "")
	os.Unsetenv("OTEL_SERVICE_NAME")

	var mu sync.Mutex
	var sent string
	got := make(chan struct{}, 1)
	sinkSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = r.Header.Get("traceparent")
		mu.Unlock()
		select {
		case got <- struct{}{}:
		default:
		}
	}))
	defer sinkSrv.Close()

	k := consumertest.NewKafka(t)
	k.MustCreateTopic(t, "events", 1)
	k.MustCreateTopic(t, "events.dlq", 1)
	dsn := consumertest.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := dedup.Table{Scope: dedup.ScopeConsumerGroup, Interval: dedup.Daily}
	eng, err := dedup.NewEngine(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureTable(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Maintain(context.Background(), time.Now(), 2, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	k.Produce(t, "events", kafka.Message{
		Value:   []byte(fmt.Sprintf(`{"eventId":%q,"type":"test"}`, id)),
		Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-" + producerTrace + "-" + producerSpan + "-01")}},
	})

	m := map[string]string{
		envvars.Brokers:               strings.Join(k.Brokers(), ","),
		envvars.Topic:                 "events",
		envvars.Group:                 "billing",
		envvars.DatabaseURL:           dsn,
		envvars.Sink:                  "http",
		envvars.SinkHTTPURL:           sinkSrv.URL,
		envvars.ListenAddr:            "127.0.0.1:0",
		"OTEL_EXPORTER_OTLP_ENDPOINT": os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"),
	}
	opts, err := Parse(nil, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.Tracing {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT set, yet tracing is off")
	}
	var logs consumertest.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, opts, &logs) }()
	select {
	case <-got:
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("the sink got no request; logs:\n%s", logs.String())
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("exit code %d; logs:\n%s", code, logs.String())
	}

	// run returned: the provider was shut down, so the spans are flushed.
	col.mu.Lock()
	defer col.mu.Unlock()
	var handle, batch *tracepb.Span
	for _, rs := range col.got {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				if svc != "billing" {
					t.Errorf("span %q exported under service.name %q, want the group billing", s.GetName(), svc)
				}
				switch s.GetName() {
				case "handle events":
					handle = s
				case "process events":
					batch = s
				}
			}
		}
	}
	if handle == nil || batch == nil {
		t.Fatalf("collector got handler span %v, batch span %v; want both", handle != nil, batch != nil)
	}
	if fmt.Sprintf("%x", handle.GetTraceId()) != producerTrace || fmt.Sprintf("%x", handle.GetParentSpanId()) != producerSpan {
		t.Errorf("handler span %x parent %x, want the record's %s/%s", handle.GetTraceId(), handle.GetParentSpanId(), producerTrace, producerSpan)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := fmt.Sprintf("00-%x-%x-01", handle.GetTraceId(), handle.GetSpanId()); sent != want {
		t.Errorf("sink request traceparent %q, want the exported handler span's %q", sent, want)
	}
}
