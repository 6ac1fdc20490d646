// Command devbroker runs a standalone Kafka-protocol broker (franz-go's kfake)
// for local development, demos and tests that kill and restart separate
// consumer processes. It is not a production broker.
//
//	devbroker -topics orders:6,orders.dlq:1 -data-dir /tmp/broker
//
// It prints "BROKERS <host:port,...>" on stdout once it accepts connections,
// then runs until SIGINT/SIGTERM. With -data-dir, topics, records and committed
// offsets survive a restart, including one after kill -9.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idempotency-dev/operator/internal/devkafka"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devbroker:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		listen  = flag.String("ports", "0", "comma-separated listen ports on 127.0.0.1, one per broker (0 = random)")
		topics  = flag.String("topics", "", "topics to create, as name:partitions[:retention.ms], comma-separated")
		dataDir = flag.String("data-dir", "", "directory to persist topics, records and offsets in (empty = in memory)")
		minSess = flag.Duration("group-min-session-timeout", 100*time.Millisecond, "smallest consumer-group session timeout the broker accepts")
		addrOut = flag.String("addr-file", "", "also write the bootstrap address list to this file once ready")
	)
	flag.Parse()

	var ports []int
	for _, p := range strings.Split(*listen, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("-ports: %q is not a port number", p)
		}
		ports = append(ports, n)
	}
	specs, err := parseTopics(*topics)
	if err != nil {
		return err
	}

	opts := []kfake.Opt{
		kfake.Ports(ports...),
		kfake.GroupMinSessionTimeout(*minSess),
	}
	if *dataDir != "" {
		if err := os.MkdirAll(*dataDir, 0o750); err != nil {
			return fmt.Errorf("creating -data-dir: %w", err)
		}
		opts = append(opts, kfake.DataDir(*dataDir), kfake.SyncWrites())
	}
	// Applied after devkafka's defaults: Ports sets the broker count.
	broker, err := devkafka.Start(opts...)
	if err != nil {
		return fmt.Errorf("starting broker: %w", err)
	}
	defer broker.Close()
	answerOffsetFetchLikeKafka(broker.Cluster())
	addrs := broker.Brokers()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range specs {
		if err := devkafka.CreateTopic(ctx, addrs, t.name, t.partitions, t.configs); err != nil {
			return err
		}
	}
	if *addrOut != "" {
		if err := os.WriteFile(*addrOut, []byte(strings.Join(addrs, ",")+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing -addr-file: %w", err)
		}
	}
	fmt.Printf("BROKERS %s\n", strings.Join(addrs, ","))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}

type topicSpec struct {
	name       string
	partitions int
	configs    map[string]string
}

func parseTopics(s string) ([]topicSpec, error) {
	var out []topicSpec
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, item := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(item), ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("-topics: %q is not name:partitions[:retention.ms]", item)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-topics: %q: partitions must be a positive integer", item)
		}
		t := topicSpec{name: parts[0], partitions: n}
		if len(parts) == 3 {
			if _, err := strconv.ParseInt(parts[2], 10, 64); err != nil {
				return nil, errors.New("-topics: " + item + ": retention.ms must be an integer")
			}
			t.configs = map[string]string{"retention.ms": parts[2]}
		}
		out = append(out, t)
	}
	return out, nil
}
