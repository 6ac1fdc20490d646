package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/consumer/version"
)

// syncBuffer is a bytes.Buffer the logger may write while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMetricsCarryBuildInfo runs the binary's main loop against nothing
// reachable (it waits for the broker and the database) and checks that
// /metrics serves idempotent_consumer_build_info with this build's version.
func TestMetricsCarryBuildInfo(t *testing.T) {
	m := base()
	m[envvars.Brokers] = "127.0.0.1:1"
	m[envvars.DatabaseURL] = "postgres://app:pw@127.0.0.1:1/app?connect_timeout=1"
	m[envvars.ListenAddr] = "127.0.0.1:0"
	opts, err := Parse(nil, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan int)
	go func() { done <- run(ctx, opts, &logs) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not return after its context was cancelled")
		}
	}()

	addr := ""
	for deadline := time.Now().Add(20 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "serving /healthz") {
				addr = rec.Addr
			}
		}
	}
	if addr == "" {
		t.Fatalf("the metrics server did not start; logs:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `idempotent_consumer_build_info{goversion="` + version.Get().GoVersion + `",revision="` + version.Get().Revision + `",version="` + version.Get().Version + `"} 1`
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}
}
