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

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Platform integrations (docs/platforms.md): a CloudNativePG Cluster in place
// of database URL Secrets, a Strimzi Kafka in place of bootstrap servers and
// broker credentials. Both are optional; the operator reads CloudNativePG's
// objects and never writes them, and owns the KafkaUser and KafkaTopic it
// makes for Strimzi.

// CloudNativePGCluster names a CloudNativePG (postgresql.cnpg.io/v1)
// Cluster and, optionally, a Pooler of it: the part of the reference an
// IdempotentConsumer and an Outbox share.
type CloudNativePGCluster struct {
	// cluster is the name of the CloudNativePG Cluster, in this object's
	// namespace. The operator's DDL connects as the Cluster's application
	// owner with its "<cluster>-app" Secret, straight to the read-write
	// Service, verifying the server with the "<cluster>-ca" Secret's ca.crt
	// (sslmode=verify-full). Immutable, like urlSecretRef.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cloudNativePG.cluster is immutable: another cluster is another database, without this object's dedup history"
	Cluster string `json:"cluster"`

	// pooler is the name of a CloudNativePG Pooler (type rw) of that
	// cluster: the consumer (an Outbox's relay) connects through its
	// Service. DDL never does. An Outbox's relay holds a session (an
	// advisory lock, LISTEN): its Pooler must be in session mode.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pooler string `json:"pooler,omitempty"`
}

// CloudNativePGSpec is an IdempotentConsumer's CloudNativePG reference.
type CloudNativePGSpec struct {
	CloudNativePGCluster `json:",inline"`

	// consumerRole is the role the consumer connects as: an entry the
	// platform declares in the Cluster's spec.managed.roles, with its
	// password Secret (kubernetes.io/basic-auth: username, password).
	// Without it the consumer uses the application owner's Secret.
	// +optional
	ConsumerRole *CloudNativePGRole `json:"consumerRole,omitempty"`
}

// OutboxCloudNativePGSpec is an Outbox's CloudNativePG reference.
type OutboxCloudNativePGSpec struct {
	CloudNativePGCluster `json:",inline"`

	// relayRole is the role the relay connects as, as
	// spec.database.relayURLSecretRef's user: an entry the platform
	// declares in the Cluster's spec.managed.roles, with its password
	// Secret (username, password). The operator grants it only what the
	// relay needs. Without it the relay uses the application owner's
	// Secret.
	// +optional
	RelayRole *CloudNativePGRole `json:"relayRole,omitempty"`
}

// CloudNativePGRole is a managed role and the Secret holding its password.
type CloudNativePGRole struct {
	// name of the role (spec.managed.roles[].name).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.lowerAscii() != 'public' && self.lowerAscii() != 'none' && !self.lowerAscii().startsWith('pg_')",message="public (every role), none and the predefined pg_ roles are refused; name the consumer's (relay's) own role"
	Name string `json:"name"`
	// secretRef is the role's passwordSecret: a Secret in this namespace
	// with the keys username and password.
	// +required
	SecretRef LocalObjectName `json:"secretRef"`
}

// LocalObjectName names an object in the referring object's namespace.
type LocalObjectName struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// StrimziAuthentication is how the KafkaUser the operator keeps authenticates.
// +kubebuilder:validation:Enum=scram-sha-512;tls
type StrimziAuthentication string

const (
	StrimziSCRAMSHA512 StrimziAuthentication = "scram-sha-512"
	StrimziTLS         StrimziAuthentication = "tls"
)

// StrimziCluster names a Strimzi (kafka.strimzi.io/v1beta2) Kafka cluster:
// the part of the reference an IdempotentConsumer and an Outbox share.
type StrimziCluster struct {
	// cluster is the name of the Strimzi Kafka, in this object's namespace
	// (the KafkaUser and KafkaTopic carry strimzi.io/cluster=<cluster>, so
	// the Entity Operator must watch this namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`

	// listener is the name of the Kafka listener whose bootstrap address
	// the pods use (status.listeners[].name). Default "tls".
	// +optional
	// +kubebuilder:validation:MaxLength=25
	Listener string `json:"listener,omitempty"`

	// authentication of the KafkaUser the operator creates: scram-sha-512
	// (the default) or tls (mutual TLS).
	// +optional
	Authentication StrimziAuthentication `json:"authentication,omitempty"`
}

// StrimziSpec is an IdempotentConsumer's Strimzi reference.
type StrimziSpec struct {
	StrimziCluster `json:",inline"`

	// deadLetterTopic shapes the KafkaTopic the operator creates for
	// spec.kafka.deadLetterTopic.
	// +optional
	DeadLetterTopic *StrimziTopicSpec `json:"deadLetterTopic,omitempty"`
}

// StrimziTopicSpec is the dead-letter KafkaTopic's shape.
type StrimziTopicSpec struct {
	// partitions of the topic. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Partitions *int32 `json:"partitions,omitempty"`
	// replicas of each partition. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32767
	Replicas *int32 `json:"replicas,omitempty"`
	// retention (retention.ms). Default: the dedup retention, since a dead
	// letter older than the dedup window cannot be replayed safely.
	// +optional
	Retention *metav1.Duration `json:"retention,omitempty"`
}

// PlatformStatus says which platform objects, Secrets and endpoints the
// operator used.
type PlatformStatus struct {
	// database: the CloudNativePG Secrets and Services used.
	// +optional
	Database *PlatformDatabaseStatus `json:"database,omitempty"`
	// kafka: the Strimzi objects and Secrets used.
	// +optional
	Kafka *PlatformKafkaStatus `json:"kafka,omitempty"`
}

// PlatformDatabaseStatus is what the CloudNativePG integration used.
type PlatformDatabaseStatus struct {
	// ownerSecret is the Secret the DDL connects with ("<cluster>-app").
	OwnerSecret string `json:"ownerSecret"`
	// caSecret holds the cluster CA ("<cluster>-ca").
	CASecret string `json:"caSecret"`
	// ddlEndpoint is the host:port the DDL connects to (the rw Service).
	DDLEndpoint string `json:"ddlEndpoint"`
	// consumerSecret is the Secret with the consumer's (an Outbox's
	// relay's) credentials.
	// +optional
	ConsumerSecret string `json:"consumerSecret,omitempty"`
	// consumerEndpoint is the host:port the consumer (relay) connects to
	// (the Pooler's Service when spec.database.cloudNativePG.pooler is
	// set).
	// +optional
	ConsumerEndpoint string `json:"consumerEndpoint,omitempty"`
	// consumerPoolMode is the Pooler's spec.pgbouncer.poolMode ("session"
	// by default); with "transaction" the consumer gets
	// CONSUMER_DATABASE_POOLER=transaction unless spec.consumer.env sets it.
	// +optional
	ConsumerPoolMode string `json:"consumerPoolMode,omitempty"`
}

// PlatformKafkaStatus is what the Strimzi integration used.
type PlatformKafkaStatus struct {
	// kafkaUser is the KafkaUser the operator keeps for the consumer (an
	// Outbox's relay); its Secret has the same name.
	KafkaUser string `json:"kafkaUser"`
	// deadLetterTopic is the KafkaTopic the operator keeps, if any.
	// +optional
	DeadLetterTopic string `json:"deadLetterTopic,omitempty"`
	// caSecret holds the cluster CA ("<cluster>-cluster-ca-cert").
	CASecret string `json:"caSecret"`
	// bootstrapServers from the Kafka's status.listeners.
	// +optional
	BootstrapServers string `json:"bootstrapServers,omitempty"`
}

// Condition reasons of the platform integrations (docs/platforms.md).
const (
	// ReasonPlatformKindAbsent: the object names a CloudNativePG or Strimzi
	// kind whose CRD is not installed (or was installed after the manager
	// started: restart it).
	ReasonPlatformKindAbsent = "PlatformKindAbsent"
	// ReasonCNPGClusterNotFound: the named CloudNativePG Cluster (or Pooler)
	// does not exist.
	ReasonCNPGClusterNotFound = "CNPGClusterNotFound"
	// ReasonCNPGSecretNotFound: the Cluster's "-app" or "-ca" Secret, or the
	// consumer's (relay's) role's Secret, does not exist (yet).
	ReasonCNPGSecretNotFound = "CNPGSecretNotFound" //nolint:gosec // G101: a condition reason, not a credential
	// ReasonKafkaClusterNotFound: the named Strimzi Kafka does not exist, or
	// has no listener of that name in its status yet.
	ReasonKafkaClusterNotFound = "KafkaClusterNotFound"
	// ReasonKafkaUserNotReady: the KafkaUser is not Ready yet (its Secret
	// and ACLs are not in place).
	ReasonKafkaUserNotReady = "KafkaUserNotReady"
	// ReasonPlatformObjectNotOwned: a KafkaUser or KafkaTopic of the name the
	// operator would use exists, is not this object's, and is not marked
	// for adoption (AnnotationAdoptPlatformObject).
	ReasonPlatformObjectNotOwned = "PlatformObjectNotOwned"
)

// AnnotationAdoptPlatformObject on a user's KafkaUser or KafkaTopic, set to
// the IdempotentConsumer's (or Outbox's) name, lets the operator take it
// over.
const AnnotationAdoptPlatformObject = "kafka.idempotency.dev/adopt"
