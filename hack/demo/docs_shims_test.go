package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// The documentation's walks use tools a cluster user has and this machine
// does not (kcat, kafka-topics.sh, a uuidgen with --time-v7), and kubectl
// logs, which needs a kubelet. The docs test (docs_test.go) links each name
// to this test binary in a directory at the front of PATH; TestMain runs the
// shim its name selects instead of the tests. Each shim does what the real
// tool does for the arguments the docs use, and refuses any other.
var shims = map[string]func(args []string, stdin io.Reader, stdout io.Writer) error{
	"uuidgen":         shimUUIDGen,
	"kafka-topics.sh": shimKafkaTopics,
	"kcat":            shimKcat,
	"kubectl":         shimKubectl,
}

// Environment of the shims, set by the docs test.
const (
	envRealKubectl = "DOCS_REAL_KUBECTL" // the real kubectl binary
	envLogDir      = "DOCS_LOG_DIR"      // where the local consumer processes log
)

func runShim(name string) int {
	if err := shims[name](os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s (docs test shim): %v\n", name, err)
		return 1
	}
	return 0
}

// shimUUIDGen is `uuidgen --time-v7` (util-linux 2.40).
func shimUUIDGen(args []string, _ io.Reader, stdout io.Writer) error {
	if len(args) != 1 || args[0] != "--time-v7" {
		return fmt.Errorf("only --time-v7 is supported, got %q", args)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, id)
	return err
}

// shimKafkaTopics is `kafka-topics.sh --bootstrap-server B --create --topic T --partitions N`.
func shimKafkaTopics(args []string, _ io.Reader, _ io.Writer) error {
	fs := flag.NewFlagSet("kafka-topics.sh", flag.ContinueOnError)
	bootstrap := fs.String("bootstrap-server", "", "")
	create := fs.Bool("create", false, "")
	topic := fs.String("topic", "", "")
	partitions := fs.Int("partitions", 1, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*create || *bootstrap == "" || *topic == "" || fs.NArg() > 0 {
		return fmt.Errorf("only --bootstrap-server B --create --topic T [--partitions N] is supported, got %q", args)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return consumertest.CreateTopic(ctx, []string{*bootstrap}, *topic, *partitions, nil)
}

// shimKcat is `kcat -P -b B -t T [-k K]`: each line of stdin is one record.
func shimKcat(args []string, stdin io.Reader, _ io.Writer) error {
	fs := flag.NewFlagSet("kcat", flag.ContinueOnError)
	produce := fs.Bool("P", false, "")
	broker := fs.String("b", "", "")
	topic := fs.String("t", "", "")
	key := fs.String("k", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*produce || *broker == "" || *topic == "" || fs.NArg() > 0 {
		return fmt.Errorf("only -P -b B -t T [-k K] is supported, got %q", args)
	}
	w := &kafka.Writer{Addr: kafka.TCP(*broker), Topic: *topic, RequiredAcks: kafka.RequireAll, Balancer: &kafka.Hash{}}
	defer w.Close()
	sc := bufio.NewScanner(stdin)
	var msgs []kafka.Message
	for sc.Scan() {
		m := kafka.Message{Value: append([]byte(nil), sc.Bytes()...)}
		if *key != "" {
			m.Key = []byte(*key)
		}
		msgs = append(msgs, m)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.WriteMessages(ctx, msgs...)
}

// shimKubectl runs the real kubectl, except `kubectl -n NS logs -l SELECTOR`:
// no kubelet serves logs here, so it prints the logs of the local processes
// that run the Deployments the selector picks (localstack.Kubelet names
// them DEPLOYMENT-local-N).
func shimKubectl(args []string, _ io.Reader, stdout io.Writer) error {
	real := os.Getenv(envRealKubectl)
	ns, selector, isLogs := "", "", false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-n" && i+1 < len(args):
			ns = args[i+1]
			i++
		case a == "-l" && i+1 < len(args):
			selector = args[i+1]
			i++
		case a == "logs":
			isLogs = true
		}
	}
	if !isLogs {
		return syscall.Exec(real, append([]string{"kubectl"}, args...), os.Environ())
	}
	if ns == "" || selector == "" {
		return fmt.Errorf("only kubectl -n NS logs -l SELECTOR is supported here, got %q", args)
	}
	out, err := exec.Command(real, "-n", ns, "get", "deployments", "-l", selector, "-o", "name").Output()
	if err != nil {
		return fmt.Errorf("listing the Deployments of %s: %w", selector, err)
	}
	for _, name := range strings.Fields(string(out)) {
		logs, _ := filepath.Glob(filepath.Join(os.Getenv(envLogDir), strings.TrimPrefix(name, "deployment.apps/")+"-local-*.log"))
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				return err
			}
			if _, err := stdout.Write(b); err != nil {
				return err
			}
		}
	}
	return nil
}
