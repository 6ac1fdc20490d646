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
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"k8s.io/apimachinery/pkg/types"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
)

func TestParseRetention(t *testing.T) {
	for _, tc := range []struct {
		ms, policy string
		want       time.Duration
		known      bool
	}{
		{"604800000", "delete", 7 * 24 * time.Hour, true},
		{"3600000", "", time.Hour, true},
		{"-1", "delete", InfiniteRetention, true},
		{"86400000", "compact", InfiniteRetention, true},
		{"86400000", "compact,delete", 24 * time.Hour, true},
		{"86400000", "delete, compact", 24 * time.Hour, true},
		{"", "compact", InfiniteRetention, true},
		{"", "delete", 0, false},
		{"soon", "delete", 0, false},
		{"9223372036854775807", "delete", InfiniteRetention, true},
	} {
		got, known := parseRetention(tc.ms, tc.policy)
		if got != tc.want || known != tc.known {
			t.Errorf("parseRetention(%q, %q) = %s, %v; want %s, %v", tc.ms, tc.policy, got, known, tc.want, tc.known)
		}
	}
	if formatRetention(InfiniteRetention) != "Infinite" || formatRetention(36*time.Hour) != "36h0m0s" {
		t.Error("formatRetention")
	}
}

func TestClassifyKafkaError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("reading topic metadata: %w", kafka.SASLAuthenticationFailed), kafkav1alpha1.ReasonKafkaAuthFailed},
		{kafka.TopicAuthorizationFailed, kafkav1alpha1.ReasonTopicAccessDenied},
		{kafka.ClusterAuthorizationFailed, kafkav1alpha1.ReasonTopicAccessDenied},
		{kafka.UnknownTopicOrPartition, kafkav1alpha1.ReasonTopicNotFound},
		{kafka.LeaderNotAvailable, kafkav1alpha1.ReasonBrokerUnreachable},
		{kafka.InvalidConfiguration, kafkav1alpha1.ReasonTopicRetentionUnknown},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, kafkav1alpha1.ReasonBrokerUnreachable},
		{context.DeadlineExceeded, kafkav1alpha1.ReasonBrokerUnreachable},
	} {
		if got := classifyKafkaError(tc.err); got != tc.want {
			t.Errorf("classifyKafkaError(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestTopicCache(t *testing.T) {
	var c topicCache
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	sched := topicSchedule{interval: time.Hour, retryBase: time.Minute, retryMax: 10 * time.Minute}
	if _, fresh := c.get(key, "fp1", t0, time.Minute); fresh {
		t.Fatal("an empty cache is fresh")
	}
	good := map[string]TopicInfo{"t": {Exists: true, Partitions: 3, Retention: time.Hour, RetentionKnown: true}}
	o := c.put(key, "fp1", t0, "t", "t.dlq", good, nil, "", sched)
	if o.good == nil || o.current.main.Partitions != 3 || o.current.dlq.Exists {
		t.Fatalf("put = %+v", o)
	}
	if _, fresh := c.get(key, "fp1", t0.Add(59*time.Second), time.Minute); !fresh {
		t.Error("not fresh within the refresh period")
	}
	if _, fresh := c.get(key, "fp1", t0.Add(time.Minute), time.Minute); fresh {
		t.Error("fresh after the refresh period")
	}
	if _, fresh := c.get(key, "fp1", t0.Add(-time.Second), time.Minute); fresh {
		t.Error("fresh although the clock went backwards")
	}
	if _, fresh := c.get(key, "fp2", t0, time.Minute); fresh {
		t.Error("fresh for another fingerprint")
	}
	// A failure keeps the last good answer, for the same fingerprint only.
	o = c.put(key, "fp1", t0.Add(2*time.Minute), "t", "t.dlq", nil, errors.New("down"), kafkav1alpha1.ReasonBrokerUnreachable, sched)
	if o.err == nil || o.good == nil || !o.goodAt.Equal(t0) {
		t.Errorf("after a failure: %+v", o)
	}
	o = c.put(key, "fp2", t0.Add(3*time.Minute), "t", "t.dlq", nil, errors.New("down"), kafkav1alpha1.ReasonBrokerUnreachable, sched)
	if o.good != nil {
		t.Error("a new fingerprint inherited the old answer")
	}
	c.forget(key)
	if _, fresh := c.get(key, "fp2", t0.Add(3*time.Minute), time.Minute); fresh {
		t.Error("forgotten entry still fresh")
	}
}

// TestTopicCacheSchedule checks when the next look at the brokers is due:
// after an inconclusive look, a backoff that doubles up to its maximum; after
// a conclusive one, the check interval; and that the observation is not
// reused past that time even within the refresh period.
func TestTopicCacheSchedule(t *testing.T) {
	var c topicCache
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	sched := topicSchedule{interval: 30 * time.Minute, retryBase: time.Minute, retryMax: 5 * time.Minute}
	refresh := time.Hour // longer than both, so only the schedule ends freshness
	down := errors.New("down")

	// Inconclusive looks in a row: 1m, 2m, 4m, 5m, 5m.
	now := t0
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute} {
		o := c.put(key, "fp", now, "t", "t.dlq", nil, down, kafkav1alpha1.ReasonBrokerUnreachable, sched)
		if got := o.next.Sub(now); got != want || o.failures != i+1 {
			t.Fatalf("failure %d: next in %s (failures %d), want %s", i+1, got, o.failures, want)
		}
		if _, fresh := c.get(key, "fp", now.Add(want-time.Nanosecond), refresh); !fresh {
			t.Errorf("failure %d: not reused before the retry is due", i+1)
		}
		if _, fresh := c.get(key, "fp", now.Add(want), refresh); fresh {
			t.Errorf("failure %d: reused when the retry is due", i+1)
		}
		now = now.Add(want)
	}

	// A conclusive look resets the backoff and schedules the periodic check.
	good := map[string]TopicInfo{"t": {Exists: true, Partitions: 3, Retention: time.Hour, RetentionKnown: true}}
	o := c.put(key, "fp", now, "t", "t.dlq", good, nil, "", sched)
	if o.failures != 0 || o.next.Sub(now) != 30*time.Minute {
		t.Errorf("after success: failures %d, next in %s; want 0, 30m", o.failures, o.next.Sub(now))
	}
	if _, fresh := c.get(key, "fp", now.Add(30*time.Minute), refresh); fresh {
		t.Error("reused when the periodic check is due")
	}
	// The refresh period still bounds reuse when it is the shorter one.
	if _, fresh := c.get(key, "fp", now.Add(10*time.Minute), 10*time.Minute); fresh {
		t.Error("reused past the refresh period")
	}
	o = c.put(key, "fp", now, "t", "t.dlq", nil, down, kafkav1alpha1.ReasonBrokerUnreachable, sched)
	if o.failures != 1 || o.next.Sub(now) != time.Minute {
		t.Errorf("first failure after a success: failures %d, next in %s; want 1, 1m", o.failures, o.next.Sub(now))
	}

	// Answers that leave the warnings Unknown count as failures too.
	for name, infos := range map[string]map[string]TopicInfo{
		"missing topic":     {"t.dlq": {Exists: true, Partitions: 1, RetentionKnown: true}},
		"no retention":      {"t": {Exists: true, Partitions: 3}},
		"describe refused":  {"t": {Exists: true, Err: errors.New("denied")}},
		"retention of dlq?": {"t": {Exists: true, Partitions: 3, RetentionKnown: true, Retention: time.Hour}, "t.dlq": {Exists: true}},
	} {
		c.forget(key)
		o := c.put(key, "fp", t0, "t", "t.dlq", infos, nil, "", sched)
		wantOK := name == "retention of dlq?" // the dead-letter topic's retention is optional
		if o.conclusive(true) != wantOK {
			t.Errorf("%s: conclusive = %v, want %v", name, o.conclusive(true), wantOK)
		}
		if want := map[bool]time.Duration{true: 30 * time.Minute, false: time.Minute}[wantOK]; o.next.Sub(t0) != want {
			t.Errorf("%s: next in %s, want %s", name, o.next.Sub(t0), want)
		}
	}

	// A missing dead-letter topic is a problem to look again for on the
	// backoff when the object's consumer dead-letters there (requireDLQ),
	// and nothing for a table-only object.
	c.forget(key)
	withDLQ := sched
	withDLQ.requireDLQ = true
	if o := c.put(key, "fp", t0, "t", "t.dlq", good, nil, "", withDLQ); o.failures != 1 || o.next.Sub(t0) != time.Minute {
		t.Errorf("dead-letter topic missing, consumer: failures %d, next in %s; want 1, 1m", o.failures, o.next.Sub(t0))
	}
	c.forget(key)
	if o := c.put(key, "fp", t0, "t", "t.dlq", good, nil, "", sched); o.failures != 0 || o.next.Sub(t0) != 30*time.Minute {
		t.Errorf("dead-letter topic missing, table only: failures %d, next in %s; want 0, 30m", o.failures, o.next.Sub(t0))
	}

	// Periodic checks disabled: a conclusive look schedules nothing and is
	// reused for the refresh period; failures are still retried.
	c.forget(key)
	off := topicSchedule{interval: -1, retryBase: time.Minute, retryMax: 5 * time.Minute}
	if o := c.put(key, "fp", t0, "t", "t.dlq", good, nil, "", off); !o.next.IsZero() {
		t.Errorf("periodic checks off: next %s, want none", o.next)
	}
	if _, fresh := c.get(key, "fp", t0.Add(59*time.Minute), refresh); !fresh {
		t.Error("periodic checks off: not reused within the refresh period")
	}
	if o := c.put(key, "fp", t0, "t", "t.dlq", nil, down, kafkav1alpha1.ReasonBrokerUnreachable, off); o.next.Sub(t0) != time.Minute {
		t.Errorf("periodic checks off: failure retried in %s, want 1m", o.next.Sub(t0))
	}
}

func TestTopicFingerprint(t *testing.T) {
	obj := newConsumer("ns", "a", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{
			Mechanism:         kafkav1alpha1.SASLScramSHA512,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "k", Key: "u"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "k", Key: "p"},
		}
	})
	values := map[kafkav1alpha1.SecretKeyRef]string{{Name: "k", Key: "u"}: "user", {Name: "k", Key: "p"}: "pw1"}
	fp := topicFingerprint(obj, values)
	if fp != topicFingerprint(obj.DeepCopy(), values) {
		t.Error("not deterministic")
	}
	values[kafkav1alpha1.SecretKeyRef{Name: "k", Key: "p"}] = "pw2"
	if fp == topicFingerprint(obj, values) {
		t.Error("a new password does not change the fingerprint")
	}
	if strings.Contains(fp, "pw") {
		t.Error("the fingerprint shows the password")
	}
	other := obj.DeepCopy()
	other.Spec.Kafka.Topic = "other"
	if topicFingerprint(other, values) == topicFingerprint(obj, values) {
		t.Error("another topic has the same fingerprint")
	}
}

// selfSignedPEM returns a server certificate for 127.0.0.1 and its PEM.
func selfSignedPEM(t testing.TB) (tls.Certificate, string) {
	t.Helper()
	c, err := consumertest.NewSelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	return c.Certificate, c.PEM
}

// TestKafkaAdminTLSAndSASL reads topics from a broker that wants TLS and
// SASL/SCRAM-SHA-512, with the connection built from Secret values as the
// reconciler builds it; a wrong password fails and its error names no
// password.
func TestKafkaAdminTLSAndSASL(t *testing.T) {
	cert, caPEM := selfSignedPEM(t)
	const user, pass = "operator", "scram-secret-pw"
	k := consumertest.NewKafka(t,
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", user, pass),
		kfake.SeedTopics(3, "orders"),
	)
	obj := newConsumer("ns", "a", func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Kafka.BootstrapServers = k.Brokers()
		o.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{CASecretRef: &kafkav1alpha1.SecretKeyRef{Name: "kafka-ca", Key: "ca.crt"}}
		o.Spec.Kafka.SASL = &kafkav1alpha1.KafkaSASL{
			Mechanism:         kafkav1alpha1.SASLScramSHA512,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: "kafka", Key: "user"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: "kafka", Key: "password"},
		}
	})
	secrets := map[string]string{"kafka-ca/ca.crt": caPEM, "kafka/user": user, "kafka/password": pass}
	value := func(ref kafkav1alpha1.SecretKeyRef) string { return secrets[ref.Name+"/"+ref.Key] }
	conn, err := kafkaConnection(obj, value)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	infos, err := KafkaAdmin{Timeout: 10 * time.Second}.Inspect(ctx, conn, "orders", "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if o := infos["orders"]; !o.Exists || o.Partitions != 3 || !o.RetentionKnown || o.Retention != 7*24*time.Hour {
		t.Errorf("orders = %+v, want 3 partitions and the default 168h retention", o)
	}
	if d := infos["orders.dlq"]; d.Exists || d.Err != nil {
		t.Errorf("orders.dlq = %+v, want absent", d)
	}

	secrets["kafka/password"] = "wrong-pw-" + randSuffix()
	conn, err = kafkaConnection(obj, value)
	if err != nil {
		t.Fatal(err)
	}
	_, err = KafkaAdmin{Timeout: 10 * time.Second}.Inspect(ctx, conn, "orders")
	if err == nil {
		t.Fatal("a wrong password was accepted")
	}
	// A Kafka broker answers a failed SCRAM exchange with error code 58
	// (KafkaAuthenticationFailed, see TestClassifyKafkaError); kfake closes
	// the connection instead, which reads as an unreachable broker.
	if got := classifyKafkaError(err); got != kafkav1alpha1.ReasonKafkaAuthFailed && got != kafkav1alpha1.ReasonBrokerUnreachable {
		t.Errorf("wrong password classified %s (%v)", got, err)
	}
	if strings.Contains(err.Error(), secrets["kafka/password"]) || strings.Contains(err.Error(), pass) {
		t.Error("the error names a password")
	}

	// A CA Secret that holds no certificate is refused before dialling.
	secrets["kafka-ca/ca.crt"] = "not a certificate"
	if _, err := kafkaConnection(obj, value); err == nil || !strings.Contains(err.Error(), "kafka-ca") {
		t.Errorf("bad CA: %v", err)
	}
}

// TestClassifyKafkaTLSFailure: a failed TLS handshake with the brokers has a
// reason of its own, KafkaTLSFailed, not BrokerUnreachable: a broker whose
// certificate the configured CA does not sign. (A port that answers no TLS (a plain broker waits for more bytes: that is a timeout,
// BrokerUnreachable).
func TestClassifyKafkaTLSFailure(t *testing.T) {
	cert, _ := selfSignedPEM(t)
	_, otherCA := selfSignedPEM(t)
	tlsBroker := consumertest.NewKafka(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}), kfake.SeedTopics(1, "orders"))
	for name, brokers := range map[string][]string{"untrusted certificate": tlsBroker.Brokers()} {
		obj := newConsumer("ns", "a", func(o *kafkav1alpha1.IdempotentConsumer) {
			o.Spec.Kafka.BootstrapServers = brokers
			o.Spec.Kafka.TLS = &kafkav1alpha1.KafkaTLS{CASecretRef: &kafkav1alpha1.SecretKeyRef{Name: "kafka-ca", Key: "ca.crt"}}
		})
		conn, err := kafkaConnection(obj, func(kafkav1alpha1.SecretKeyRef) string { return otherCA })
		if err != nil {
			t.Fatal(err)
		}
		_, err = KafkaAdmin{Timeout: 5 * time.Second}.Inspect(context.Background(), conn, "orders")
		if err == nil {
			t.Fatalf("%s: the handshake succeeded", name)
		}
		if got := classifyKafkaError(err); got != kafkav1alpha1.ReasonKafkaTLSFailed {
			t.Errorf("%s: classified %s, want %s (%v)", name, got, kafkav1alpha1.ReasonKafkaTLSFailed, err)
		}
		if !brokerConnectFailure(kafkav1alpha1.ReasonKafkaTLSFailed) {
			t.Error("KafkaTLSFailed is not a connect failure: its details would reach the status")
		}
	}
}
