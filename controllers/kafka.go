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
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// KafkaConnection says how to reach the brokers: the addresses and, read from
// the object's Secrets, TLS and SASL.
type KafkaConnection struct {
	Brokers []string
	TLS     *tls.Config
	SASL    sasl.Mechanism
}

// TopicInfo is what the brokers say about one topic.
type TopicInfo struct {
	// Exists is false when the brokers do not know the topic.
	Exists bool
	// Partitions is the topic's partition count.
	Partitions int32
	// Retention is how long the topic keeps records; InfiniteRetention when
	// retention.ms is -1 or the topic is compacted (cleanup.policy compact
	// without delete keeps the last record of every key forever).
	Retention time.Duration
	// RetentionKnown is false when the brokers did not report retention.ms.
	RetentionKnown bool
	// MaxMessageBytes is the topic's max.message.bytes, the largest record
	// batch it takes; 0 when the brokers did not report it.
	MaxMessageBytes int64
	// Err is a per-topic error (for example not authorized to describe it).
	Err error
}

// InfiniteRetention stands for a topic that never deletes records.
const InfiniteRetention = time.Duration(-1)

// TopicInspector reads topic metadata and configuration from the brokers.
// The default is KafkaAdmin; tests may inject their own.
type TopicInspector interface {
	// Inspect describes the topics. An error means the brokers could not be
	// asked at all (unreachable, authentication failed); per-topic problems
	// are in TopicInfo.Err.
	Inspect(ctx context.Context, conn KafkaConnection, topics ...string) (map[string]TopicInfo, error)
}

// KafkaAdmin is the TopicInspector that talks to the brokers with the Kafka
// admin API (Metadata and DescribeConfigs), through segmentio/kafka-go.
type KafkaAdmin struct {
	// Timeout bounds one Inspect; default 10s.
	Timeout time.Duration
}

// Inspect implements TopicInspector.
func (a KafkaAdmin) Inspect(ctx context.Context, conn KafkaConnection, topics ...string) (map[string]TopicInfo, error) {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	transport := &kafka.Transport{
		ClientID:    "idempotency-operator",
		DialTimeout: min(timeout, 5*time.Second),
		TLS:         conn.TLS,
		SASL:        conn.SASL,
		MetadataTTL: timeout,
	}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(conn.Brokers...), Transport: transport, Timeout: timeout}

	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("reading topic metadata: %w", err)
	}
	out := make(map[string]TopicInfo, len(topics))
	var describe []kafka.DescribeConfigRequestResource
	for _, t := range md.Topics {
		info := TopicInfo{}
		switch {
		case errors.Is(t.Error, kafka.UnknownTopicOrPartition):
		case t.Error != nil:
			info.Err = t.Error
		default:
			info.Exists = true
			info.Partitions = int32(len(t.Partitions)) //nolint:gosec // G115: Kafka counts partitions in an int32
			describe = append(describe, kafka.DescribeConfigRequestResource{
				ResourceType: kafka.ResourceTypeTopic,
				ResourceName: t.Name,
				ConfigNames:  []string{"retention.ms", "cleanup.policy", "max.message.bytes"},
			})
		}
		out[t.Name] = info
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			out[t] = TopicInfo{}
		}
	}
	if len(describe) == 0 {
		return out, nil
	}
	dc, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: describe})
	if err != nil {
		return nil, fmt.Errorf("reading topic configuration: %w", err)
	}
	for _, r := range dc.Resources {
		info := out[r.ResourceName]
		if r.Error != nil {
			info.Err = r.Error
			out[r.ResourceName] = info
			continue
		}
		var retention, policy string
		for _, e := range r.ConfigEntries {
			switch e.ConfigName {
			case "retention.ms":
				retention = e.ConfigValue
			case "cleanup.policy":
				policy = e.ConfigValue
			case "max.message.bytes":
				if n, err := strconv.ParseInt(e.ConfigValue, 10, 64); err == nil && n > 0 {
					info.MaxMessageBytes = n
				}
			}
		}
		info.Retention, info.RetentionKnown = parseRetention(retention, policy)
		out[r.ResourceName] = info
	}
	return out, nil
}

// parseRetention turns retention.ms and cleanup.policy into a duration.
func parseRetention(retentionMS, cleanupPolicy string) (time.Duration, bool) {
	policies := strings.Split(strings.ReplaceAll(cleanupPolicy, " ", ""), ",")
	compact, del := false, false
	for _, p := range policies {
		switch p {
		case "compact":
			compact = true
		case "delete":
			del = true
		}
	}
	if compact && !del {
		return InfiniteRetention, true
	}
	if retentionMS == "" {
		return 0, false
	}
	ms, err := strconv.ParseInt(retentionMS, 10, 64)
	if err != nil {
		return 0, false
	}
	if ms < 0 {
		return InfiniteRetention, true
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return InfiniteRetention, true // beyond 292 years
	}
	return time.Duration(ms) * time.Millisecond, true
}

// formatRetention shows a retention for status and messages.
func formatRetention(d time.Duration) string {
	if d == InfiniteRetention {
		return "Infinite"
	}
	return d.String()
}

// kafkaConnection builds the connection of an object from the Secret values
// its TLS and SASL settings name. values maps a Secret reference to its value.
func kafkaConnection(obj *kafkav1alpha1.IdempotentConsumer, value func(kafkav1alpha1.SecretKeyRef) string) (KafkaConnection, error) {
	k := obj.Spec.Kafka
	return kafkaClientConnection(k.BootstrapServers, k.TLS, k.SASL, value)
}

// kafkaClientConnection builds a connection to brokers with the TLS and
// SASL settings of a spec (an IdempotentConsumer's or an Outbox's).
func kafkaClientConnection(brokers []string, kt *kafkav1alpha1.KafkaTLS, ks *kafkav1alpha1.KafkaSASL, value func(kafkav1alpha1.SecretKeyRef) string) (KafkaConnection, error) {
	conn := KafkaConnection{Brokers: append([]string(nil), brokers...)}
	if t := kt; t != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // the user's explicit choice, for development
		if t.CASecretRef != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(value(*t.CASecretRef))) {
				return KafkaConnection{}, fmt.Errorf("the CA bundle in Secret %q key %q holds no PEM certificate", t.CASecretRef.Name, t.CASecretRef.Key)
			}
			cfg.RootCAs = pool
		}
		if t.ClientCertSecretRef != nil && t.ClientKeySecretRef != nil {
			cert, err := tls.X509KeyPair([]byte(value(*t.ClientCertSecretRef)), []byte(value(*t.ClientKeySecretRef)))
			if err != nil {
				// The error of X509KeyPair names no key material.
				return KafkaConnection{}, fmt.Errorf("the client certificate in Secret %q and key in Secret %q do not form a key pair: %w",
					t.ClientCertSecretRef.Name, t.ClientKeySecretRef.Name, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		conn.TLS = cfg
	}
	if s := ks; s != nil {
		user, pass := value(s.UsernameSecretRef), value(s.PasswordSecretRef)
		switch s.Mechanism {
		case kafkav1alpha1.SASLPlain:
			conn.SASL = plain.Mechanism{Username: user, Password: pass}
		case kafkav1alpha1.SASLScramSHA256, kafkav1alpha1.SASLScramSHA512:
			algo := scram.SHA256
			if s.Mechanism == kafkav1alpha1.SASLScramSHA512 {
				algo = scram.SHA512
			}
			m, err := scram.Mechanism(algo, user, pass)
			if err != nil {
				return KafkaConnection{}, fmt.Errorf("preparing SASL %s: %w", s.Mechanism, err)
			}
			conn.SASL = m
		default:
			return KafkaConnection{}, fmt.Errorf("unknown SASL mechanism %q", s.Mechanism)
		}
	}
	return conn, nil
}

// tlsHandshakeFailure reports an error of the TLS handshake itself: the
// brokers' certificate is not trusted or names another host, or what
// answered sent something that is not TLS.
func tlsHandshakeFailure(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
		alert   tls.AlertError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &record) || errors.As(err, &alert)
}

// classifyKafkaError maps an Inspect error (or a per-topic error) to a
// condition reason. A Kafka error code says what the broker refused; any
// other error (refused or reset connections, timeouts, name resolution, a
// failed TLS handshake) means the brokers could not be asked.
func classifyKafkaError(err error) string {
	if tlsHandshakeFailure(err) {
		return kafkav1alpha1.ReasonKafkaTLSFailed
	}
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return kafkav1alpha1.ReasonBrokerUnreachable
	}
	switch kerr {
	case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
		return kafkav1alpha1.ReasonKafkaAuthFailed
	case kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed:
		return kafkav1alpha1.ReasonTopicAccessDenied
	case kafka.UnknownTopicOrPartition:
		return kafkav1alpha1.ReasonTopicNotFound
	}
	if kerr.Temporary() {
		return kafkav1alpha1.ReasonBrokerUnreachable
	}
	return kafkav1alpha1.ReasonTopicRetentionUnknown
}
