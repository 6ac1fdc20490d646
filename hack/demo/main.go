// Command demo runs the whole system on one machine with no cluster, no Docker
// and no internet: a real kube-apiserver and etcd (envtest, built once and
// cached), a throwaway PostgreSQL, the standalone Kafka-protocol broker, the
// operator, and the consumer processes that the operator's Deployment
// specifies. It produces events with realistic trouble (duplicates, a replay,
// malformed events, one far outside the dedup window) and prints a report
// whose numbers must reconcile.
//
//	go run ./hack/demo            # run, report, clean up
//	go run ./hack/demo -hold      # keep everything running after the report until Ctrl-C
//
// Everything it starts is stopped, and every temporary directory removed, on
// exit, on Ctrl-C and on SIGTERM. All its files live in one icop-demo-*
// directory; after a SIGKILL, the next run removes it and kills what it left
// running (the envtest control plane, which does not die with its parent).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	opts := defaultOptions()
	flag.IntVar(&opts.Unique, "events", opts.Unique, "unique valid events to produce")
	flag.IntVar(&opts.Orders, "orders", opts.Orders, "orders of the outbox hop (every 10th declined: rolled back with its event)")
	flag.IntVar(&opts.Partitions, "partitions", opts.Partitions, "partitions of the demo topic")
	flag.StringVar(&opts.Sample, "sample", opts.Sample, "IdempotentConsumer sample to apply")
	flag.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "give up if the run takes longer than this")
	flag.BoolVar(&opts.Hold, "hold", false, "after the report, keep everything running until Ctrl-C")
	flag.BoolVar(&opts.Once, "once", true, "run once and exit after the report (the default; -hold overrides)")
	flag.BoolVar(&opts.Verbose, "v", false, "stream the operator's and consumers' logs")
	flag.Parse()

	// envtest logs through controller-runtime; the demo prints its own progress.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep, err := Run(ctx, opts, os.Stderr)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "demo: interrupted; everything stopped and removed")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if problems := rep.Check(); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "demo: invariant violated:", p)
		}
		os.Exit(1)
	}
}

// Options configure a run.
type Options struct {
	Unique     int           // unique valid events
	Orders     int           // orders of the outbox hop (every 10th declined)
	Partitions int           // Kafka partitions of the topic
	Sample     string        // path of the IdempotentConsumer sample
	Timeout    time.Duration // overall deadline
	Hold       bool
	Once       bool
	Verbose    bool
	Root       string // repository root; found from the working directory when empty
	Progress   io.Writer
}

func defaultOptions() Options {
	return Options{
		Unique:     2000,
		Orders:     200,
		Partitions: 4,
		Sample:     "config/samples/kafka_v1alpha1_idempotentconsumer_ledger.yaml",
		Timeout:    10 * time.Minute,
		Once:       true,
	}
}
