/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// TestDatabaseURLIsNoPortScanner: a namespace user who writes the URL
// Secret learns from status only a coarse reason, never the host, port,
// user or the dial error (refused or open), which go to the operator's log;
// with --database-host-allowlist a host off the list is refused with
// DatabaseHostNotAllowed and never dialed.
func TestDatabaseURLIsNoPortScanner(t *testing.T) {
	allow, err := ParseHostAllowlist("db.internal.example, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	te := startEnv(t, envOptions{options: Options{DatabaseHostAllowlist: allow}})

	// A listener that counts connections: nothing may dial it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var dialed atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			_ = c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	t.Run("HostNotAllowed", func(t *testing.T) {
		ns := te.namespace(t)
		te.secret(t, ns, "db", map[string]string{"url": "postgres://scanuser:pw-123456@127.0.0.1:" + port + "/x?connect_timeout=2"})
		te.create(t, newConsumer(ns, "c"))
		got := te.waitCondition(t, ns, "c", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDatabaseHostNotAllowed)
		assertNoDialDetails(t, got, port)
		if n := dialed.Load(); n != 0 {
			t.Errorf("the operator dialed a host off the allow-list %d time(s)", n)
		}
	})

	t.Run("UnreachableHidesDetails", func(t *testing.T) {
		// An allowed name that does not resolve, and an allowed address
		// nothing listens on: both only "DatabaseUnreachable".
		for i, u := range []string{
			"postgres://scanuser:pw-123456@db.internal.example:" + port + "/x?connect_timeout=2",
			"postgres://scanuser:pw-123456@10.255.255.1:" + port + "/x?connect_timeout=1",
		} {
			ns := te.namespace(t)
			te.secret(t, ns, "db", map[string]string{"url": u})
			name := fmt.Sprintf("c%d", i)
			te.create(t, newConsumer(ns, name))
			got := te.waitCondition(t, ns, name, kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, kafkav1alpha1.ReasonDatabaseUnreachable)
			assertNoDialDetails(t, got, port)
		}
		// The details are in the operator's log, without the password.
		logs := te.logs.String()
		if !strings.Contains(logs, "Database connection failed") {
			t.Error("the dial error's details were not logged")
		}
		if strings.Contains(logs, "pw-123456") {
			t.Error("the operator's log holds the password")
		}
	})
}

// TestBrokerAddressIsNoPortScanner: the brokers' side of the same
// problem. spec.kafka.bootstrapServers makes the operator dial wherever it
// names; the topic conditions say only BrokerUnreachable with a fixed
// message that names the addresses as the spec wrote them (issue 33: the
// condition names what to fix), and never what the dial found (refused,
// reset, no such host, timeout), which goes to the operator's log: the
// message is the same, but for the address, whether the port is open,
// closed or the name does not resolve.
func TestBrokerAddressIsNoPortScanner(t *testing.T) {
	te := startEnv(t, envOptions{options: Options{KafkaTimeout: 2 * time.Second}})
	// A port that accepts and hangs up at once, and one nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	open := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	closedLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(closedLn.Addr().(*net.TCPAddr).Port)
	_ = closedLn.Close()

	dbURL := consumertest.DatabaseURL(t)
	messages := map[string]bool{}
	for i, broker := range []string{"127.0.0.1:" + open, "127.0.0.1:" + closed, "broker.nowhere.invalid:" + closed} {
		ns := te.namespace(t)
		te.secret(t, ns, "db", map[string]string{"url": dbURL})
		name := fmt.Sprintf("b%d", i)
		te.create(t, newConsumer(ns, name, func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Kafka.BootstrapServers = []string{broker}
		}))
		te.waitCondition(t, ns, name, kafkav1alpha1.ConditionTopicRetentionCovered, metav1.ConditionUnknown, kafkav1alpha1.ReasonBrokerUnreachable)
		got := te.waitCondition(t, ns, name, kafkav1alpha1.ConditionKafkaReady, metav1.ConditionFalse, kafkav1alpha1.ReasonBrokerUnreachable)
		if msg := got.GetCondition(kafkav1alpha1.ConditionKafkaReady).Message; !strings.Contains(msg, broker) {
			t.Errorf("%s: KafkaReady does not name the address: %s", broker, msg)
		} else {
			messages[strings.ReplaceAll(msg, broker, "<address>")] = true
		}
		for _, c := range got.Status.Conditions {
			// The address as written is named; nothing the dial found out.
			msg := strings.ReplaceAll(c.Message, broker, "<address>")
			for _, leak := range []string{"127.0.0.1", "broker.nowhere.invalid", open, closed, "refused", "reset", "EOF", "dial", "lookup", "no such host", "i/o timeout"} {
				if strings.Contains(msg, leak) {
					t.Errorf("%s: condition %s (%s) reveals %q: %s", broker, c.Type, c.Reason, leak, c.Message)
				}
			}
		}
		for _, ev := range te.events(t, ns, name) {
			for _, leak := range []string{"refused", "dial", "lookup"} {
				if strings.Contains(ev.Note, leak) {
					t.Errorf("%s: Event %s reveals %q: %s", broker, ev.Reason, leak, ev.Note)
				}
			}
		}
	}
	if len(messages) != 1 {
		t.Errorf("open port, closed port and unresolvable name got different messages: %v", messages)
	}
	if logs := te.logs.String(); !strings.Contains(logs, "Cannot read the topics from the brokers") || !strings.Contains(logs, "refused") {
		t.Error("the brokers' dial errors were not logged")
	}
}

// assertNoDialDetails fails if a condition of obj names the host, port or
// user of the URL, or quotes a dial error.
func assertNoDialDetails(t *testing.T, obj *kafkav1alpha1.IdempotentConsumer, port string) {
	t.Helper()
	for _, c := range obj.Status.Conditions {
		for _, leak := range []string{"127.0.0.1", "10.255.255.1", "db.internal.example", port, "scanuser", "pw-123456", "refused", "dial", "timeout", "lookup"} {
			if strings.Contains(c.Message, leak) {
				t.Errorf("condition %s (%s) reveals %q: %s", c.Type, c.Reason, leak, c.Message)
			}
		}
	}
}
