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

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DedupScope says which key the processed_event table deduplicates on.
// +kubebuilder:validation:Enum=ConsumerGroup;Global
type DedupScope string

const (
	// ScopeConsumerGroup keys the table by (event_id, consumer_group): several
	// consumer groups reading one topic each process every event once.
	ScopeConsumerGroup DedupScope = "ConsumerGroup"
	// ScopeGlobal keys the table by event_id alone: an event is processed once
	// by whichever group sees it first.
	ScopeGlobal DedupScope = "Global"
)

// PartitionInterval is the time span one partition of the table covers.
// +kubebuilder:validation:Enum=Hourly;Daily;Weekly;Monthly
type PartitionInterval string

const (
	IntervalHourly  PartitionInterval = "Hourly"
	IntervalDaily   PartitionInterval = "Daily"
	IntervalWeekly  PartitionInterval = "Weekly"
	IntervalMonthly PartitionInterval = "Monthly"
)

// OutOfWindowPolicy says what the consumer does with an event whose id falls
// outside the table's partitions, so it cannot be deduplicated.
// +kubebuilder:validation:Enum=DeadLetter;Skip;Stop;Process
type OutOfWindowPolicy string

const (
	// OutOfWindowDeadLetter sends the event to the dead-letter topic.
	OutOfWindowDeadLetter OutOfWindowPolicy = "DeadLetter"
	// OutOfWindowSkip drops the event (counted in the consumer's metrics).
	OutOfWindowSkip OutOfWindowPolicy = "Skip"
	// OutOfWindowStop stops the consumer on the event: its offset does not
	// move until the window is fixed or the policy changed.
	OutOfWindowStop OutOfWindowPolicy = "Stop"
	// OutOfWindowProcess processes the event without deduplication.
	OutOfWindowProcess OutOfWindowPolicy = "Process"
)

// DeletionPolicy says what happens to the table when the object is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionRetain keeps the table and its data.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete drops the table, and only if this object created it.
	DeletionDelete DeletionPolicy = "Delete"
)

// SinkType selects what the ready-made consumer does with each new event.
// +kubebuilder:validation:Enum=HTTP;SQL;Log;None
type SinkType string

const (
	// SinkHTTP POSTs each event to a URL with an Idempotency-Key header.
	SinkHTTP SinkType = "HTTP"
	// SinkSQL runs a statement per event in the dedup transaction.
	SinkSQL SinkType = "SQL"
	// SinkLog logs each new event (for trying things out).
	SinkLog SinkType = "Log"
	// SinkNone configures no sink: for a custom image that brings its own handler.
	SinkNone SinkType = "None"
)

// Ordering says which records of one Kafka partition the consumer may process
// at the same time.
// +kubebuilder:validation:Enum=Partition;Key;Unordered
type Ordering string

const (
	// OrderingPartition processes a partition's records one after another,
	// in offset order.
	OrderingPartition Ordering = "Partition"
	// OrderingKey processes records with different Kafka keys concurrently
	// and records with the same key in offset order.
	OrderingKey Ordering = "Key"
	// OrderingUnordered processes any of a partition's records concurrently.
	OrderingUnordered Ordering = "Unordered"
)

// SASLMechanism is a Kafka SASL mechanism.
// +kubebuilder:validation:Enum=PLAIN;SCRAM-SHA-256;SCRAM-SHA-512
type SASLMechanism string

const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// SecretKeyRef selects one key of a Secret in the object's namespace.
type SecretKeyRef struct {
	// name of the Secret, in the IdempotentConsumer's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// IdempotentConsumerSpec declares a Kafka consumer with an exactly-once effect:
// where it reads, which PostgreSQL table remembers what it has processed, how
// that table is partitioned and for how long it remembers, and how the consumer
// itself runs.
type IdempotentConsumerSpec struct {
	// kafka says where the consumer reads from.
	// +required
	Kafka KafkaSpec `json:"kafka"`

	// database says which PostgreSQL database and table hold the dedup records.
	// +required
	Database DatabaseSpec `json:"database"`

	// dedup is the deduplication and partitioning policy.
	// +optional
	// +kubebuilder:default={}
	Dedup DedupSpec `json:"dedup,omitzero"`

	// consumer describes the consumer Deployment the operator runs.
	// +required
	Consumer ConsumerSpec `json:"consumer"`

	// deletionPolicy says what happens to the table when this object is
	// deleted: Retain (the default) keeps it; Delete drops it, and only if this
	// object created it (its ownership marker is on the table).
	// +optional
	// +kubebuilder:default=Retain
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// suspend stops reconciliation: no DDL and no changes to the Deployment
	// while it is true. Partition maintenance stops too, so a long suspension
	// runs the table out of premade partitions. Deletion is still honoured.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// autoscaling lets KEDA scale the consumer Deployment on the consumer
	// group's lag. It needs KEDA (2.13 or later) in the cluster: the operator
	// then creates a ScaledObject and leaves the Deployment's replica count to
	// it, and spec.consumer.replicas is ignored. Without KEDA the condition
	// AutoscalingReady says so and spec.consumer.replicas (and the scale
	// subresource) keep working.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`
}

// AutoscalingSpec configures a KEDA ScaledObject with a Kafka trigger on the
// consumer group's lag.
// +kubebuilder:validation:XValidation:rule="self.maxReplicas >= (has(self.minReplicas) ? self.minReplicas : 1)",message="maxReplicas must be at least minReplicas (default 1)"
type AutoscalingSpec struct {
	// enabled turns autoscaling on. False keeps the settings but runs
	// spec.consumer.replicas, and removes the ScaledObject.
	// +required
	Enabled bool `json:"enabled"`

	// minReplicas is the fewest consumer pods. 0 lets KEDA scale the consumer
	// to zero while the group has no lag (see activationLagThreshold).
	// Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// maxReplicas is the most consumer pods. The operator caps it at the
	// topic's partition count when it knows it (a consumer beyond that count
	// would sit idle).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`

	// lagThreshold is the target lag per replica: KEDA runs about
	// total lag / lagThreshold replicas (KEDA's Kafka trigger lagThreshold).
	// Default 1000, two batches of the default batch size.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	LagThreshold *int64 `json:"lagThreshold,omitempty"`

	// activationLagThreshold is the lag above which a consumer scaled to zero
	// is started again (KEDA's activationLagThreshold). Only with
	// minReplicas 0. Default 0: any lag starts it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	ActivationLagThreshold *int64 `json:"activationLagThreshold,omitempty"`

	// pollingInterval is how often KEDA reads the lag, in seconds. Empty
	// means KEDA's default (30).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PollingInterval *int32 `json:"pollingInterval,omitempty"`

	// cooldownPeriod is how long KEDA waits after the last lag before it
	// scales to zero, in seconds (only with minReplicas 0). Empty means
	// KEDA's default (300).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	CooldownPeriod *int32 `json:"cooldownPeriod,omitempty"`
}

// KafkaSpec says where the consumer reads from and how it authenticates.
// +kubebuilder:validation:XValidation:rule="!has(self.deadLetterTopic) || self.deadLetterTopic != self.topic",message="deadLetterTopic must differ from topic"
type KafkaSpec struct {
	// bootstrapServers are the brokers to bootstrap from, as host:port.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^(\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?):[0-9]{1,5}$`
	// +listType=set
	BootstrapServers []string `json:"bootstrapServers"`

	// topic to consume.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+$`
	// +kubebuilder:validation:XValidation:rule="self != '.' && self != '..'",message="topic must not be '.' or '..'"
	Topic string `json:"topic"`

	// groupID is the Kafka consumer group. With dedup scope ConsumerGroup it is
	// also part of the dedup key, so changing it starts a new dedup history.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._:-]+$`
	GroupID string `json:"groupID"`

	// deadLetterTopic receives events that fail permanently and, with the
	// DeadLetter out-of-window policy, events that cannot be deduplicated.
	// Empty means "<topic>.dlq".
	// +optional
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+$`
	DeadLetterTopic string `json:"deadLetterTopic,omitempty"`

	// tls enables TLS to the brokers. Absent means plaintext.
	// +optional
	TLS *KafkaTLS `json:"tls,omitempty"`

	// sasl enables SASL authentication to the brokers.
	// +optional
	SASL *KafkaSASL `json:"sasl,omitempty"`
}

// KafkaTLS configures TLS to the brokers. Certificates come from Secrets and
// are mounted into the consumer as files.
// +kubebuilder:validation:XValidation:rule="has(self.clientCertSecretRef) == has(self.clientKeySecretRef)",message="clientCertSecretRef and clientKeySecretRef must be set together"
type KafkaTLS struct {
	// caSecretRef selects a PEM CA bundle to verify the brokers with. Absent
	// means the system roots of the consumer image.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`

	// clientCertSecretRef selects a PEM client certificate, for mutual TLS.
	// +optional
	ClientCertSecretRef *SecretKeyRef `json:"clientCertSecretRef,omitempty"`

	// clientKeySecretRef selects the PEM private key of the client certificate.
	// +optional
	ClientKeySecretRef *SecretKeyRef `json:"clientKeySecretRef,omitempty"`

	// insecureSkipVerify disables verification of the brokers' certificates.
	// For development only.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// KafkaSASL configures SASL authentication; credentials come from Secrets.
type KafkaSASL struct {
	// mechanism is the SASL mechanism.
	// +required
	Mechanism SASLMechanism `json:"mechanism"`

	// usernameSecretRef selects the SASL user name.
	// +required
	UsernameSecretRef SecretKeyRef `json:"usernameSecretRef"`

	// passwordSecretRef selects the SASL password.
	// +required
	PasswordSecretRef SecretKeyRef `json:"passwordSecretRef"`
}

// DatabaseSpec says where the processed_event table lives.
type DatabaseSpec struct {
	// urlSecretRef selects a Secret key holding a PostgreSQL connection URL
	// (postgres://user:password@host:5432/db?sslmode=require). The operator uses
	// it for DDL (its role owns the table), and the consumer for its
	// transactions unless consumerURLSecretRef gives it a role of its own;
	// it never appears in the object, in logs or in events.
	// +required
	URLSecretRef SecretKeyRef `json:"urlSecretRef"`

	// consumerURLSecretRef selects a Secret key holding the connection URL
	// the consumer pods use, as a PostgreSQL role of their own (create it
	// with CREATE ROLE ... LOGIN; it needs no privilege of its own). The
	// operator reads the role's name from the URL's user, never connects with
	// it, and grants that role only what the consumer runtime needs on the
	// table: USAGE on the schema, SELECT, INSERT and DELETE on the table,
	// SELECT, INSERT and UPDATE on its positions table <table>_offsets,
	// EXECUTE on its claim functions, and row-level security policies that
	// limit it to this object's consumer group's rows (with scope Global the
	// dedup rows are shared by every group and only the positions are
	// limited). The role cannot DROP, TRUNCATE or ALTER the table or rewrite
	// its ownership marker. The URL must name the same database as
	// urlSecretRef, whose role owns the table and runs its DDL; that URL then
	// never reaches the consumer pods. When the role changes, or this field
	// is removed, the operator takes the grants of the previous role back.
	// Absent: the consumer uses urlSecretRef too (one role for everything,
	// fine for development), and the DatabaseRoles condition says so with
	// reason SingleRole. docs/security.md shows the setup.
	// +optional
	ConsumerURLSecretRef *SecretKeyRef `json:"consumerURLSecretRef,omitempty"`

	// caSecretRef selects a PEM CA bundle (one or more certificates) to
	// verify the PostgreSQL server's certificate with, for a server whose
	// certificate a private CA signed (RDS, Cloud SQL, CloudNativePG, your
	// own). The operator verifies with it in memory; the consumer pods get it
	// mounted as a file and PGSSLROOTCERT pointing at it, which pgx and libpq
	// read as sslrootcert when the URL does not name one. A URL without
	// sslmode is then used with sslmode=verify-full (both pods); a URL may
	// say sslmode=verify-ca or verify-full, and any weaker sslmode
	// (disable, allow, prefer, require) or an sslrootcert in the URL is
	// refused with DatabaseReady=False, reason InvalidDatabaseURL, so the
	// CA is never silently left unused. Absent means the URL's own TLS
	// settings (with the system roots of each image for verify-full).
	// docs/database-secrets.md has examples.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`

	// schema holding the table. Created if missing. Immutable.
	// +optional
	// +kubebuilder:default=public
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="schema is immutable: create a new object to move the table"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('pg_') && self != 'information_schema'",message="schema must not be a system schema (pg_*, information_schema)"
	// +kubebuilder:validation:XValidation:rule="!(self in ['all','analyse','analyze','and','any','array','as','asc','asymmetric','authorization','binary','both','case','cast','check','collate','collation','column','concurrently','constraint','create','cross','current_catalog','current_date','current_role','current_schema','current_time','current_timestamp','current_user','default','deferrable','desc','distinct','do','else','end','except','false','fetch','for','foreign','freeze','from','full','grant','group','having','ilike','in','initially','inner','intersect','into','is','isnull','join','lateral','leading','left','like','limit','localtime','localtimestamp','natural','not','notnull','null','offset','on','only','or','order','outer','overlaps','placing','primary','references','returning','right','select','session_user','similar','some','symmetric','system_user','table','tablesample','then','to','trailing','true','union','unique','user','using','variadic','verbose','when','where','window','with'])",message="schema must not be a PostgreSQL reserved word"
	Schema string `json:"schema,omitempty"`

	// table is the name of the partitioned processed_event table. Its
	// partitions are named after it with a time suffix, so it is at most 51
	// bytes. Immutable.
	// +optional
	// +kubebuilder:default=processed_event
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=51
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="table is immutable: create a new object for a new table"
	// +kubebuilder:validation:XValidation:rule="!(self in ['all','analyse','analyze','and','any','array','as','asc','asymmetric','authorization','binary','both','case','cast','check','collate','collation','column','concurrently','constraint','create','cross','current_catalog','current_date','current_role','current_schema','current_time','current_timestamp','current_user','default','deferrable','desc','distinct','do','else','end','except','false','fetch','for','foreign','freeze','from','full','grant','group','having','ilike','in','initially','inner','intersect','into','is','isnull','join','lateral','leading','left','like','limit','localtime','localtimestamp','natural','not','notnull','null','offset','on','only','or','order','outer','overlaps','placing','primary','references','returning','right','select','session_user','similar','some','symmetric','system_user','table','tablesample','then','to','trailing','true','union','unique','user','using','variadic','verbose','when','where','window','with'])",message="table must not be a PostgreSQL reserved word"
	Table string `json:"table,omitempty"`

	// adoptFromUID lets this object take over an existing table whose
	// ownership marker names another object: the UID (metadata.uid) of the
	// IdempotentConsumer that created or last adopted it, typically this
	// object's predecessor, deleted with deletionPolicy Retain and created
	// again (a GitOps re-sync, a re-created namespace, a move to another
	// cluster, a restore from backup), which gives it a new UID. The UID in
	// the marker is in the DatabaseReady message of the refused object
	// (reason TableClaimedByAnotherObject), or in the table's comment:
	// SELECT obj_description('schema.table'::regclass, 'pg_class').
	//
	// When the marker names this UID and the table's layout matches the spec
	// (scope, interval, columns), the operator rewrites the marker of the
	// table and of each of its partitions to name this object, in one
	// database transaction, records a Normal Event with reason TableAdopted,
	// and carries on as usual: the rows, and so the deduplication history,
	// are kept. It refuses, changing nothing, when the marker names a third
	// UID (TableClaimedByAnotherObject, with both UIDs in the message), when
	// the table has no marker (TableNotOwned), when the layout differs
	// (TableLayoutMismatch), and when an IdempotentConsumer with this UID
	// still exists in this cluster (TableClaimedByAnotherObject: delete it
	// first, with deletionPolicy Retain). A table that does not exist is
	// created as without this field. Nothing is ever adopted without it.
	//
	// Only set it when no object anywhere still uses that UID: the operator
	// can check this cluster only, and two clusters can share a database.
	// The previous owner's operator, if it still ran, would from then on
	// find the table claimed by this object and stop maintaining it.
	//
	// Once the marker names this object the field has no effect, so it can
	// stay in Git. It is mutable: a wrong UID can be corrected, and the
	// field removed after the adoption, without re-creating the object.
	// At most 253 characters of letters, digits and ._:/-, the characters
	// the ownership marker accepts.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`
	AdoptFromUID string `json:"adoptFromUID,omitempty"`
}

// DedupSpec is the deduplication and partitioning policy.
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.interval) || duration(self.retention) >= (self.interval == 'Hourly' ? duration('1h') : self.interval == 'Daily' ? duration('24h') : self.interval == 'Weekly' ? duration('168h') : duration('744h'))",message="retention must be at least one partition interval (Hourly 1h, Daily 24h, Weekly 168h, Monthly 744h)"
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.interval) || self.interval != 'Hourly' || duration(self.retention) <= duration('1920h')",message="with Hourly partitions retention must be at most 1920h (80 days), or the table gets too many partitions; use Daily"
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.interval) || self.interval != 'Daily' || duration(self.retention) <= duration('46080h')",message="with Daily partitions retention must be at most 46080h (1920 days), or the table gets too many partitions; use Weekly"
type DedupSpec struct {
	// scope of the dedup key: ConsumerGroup (the default) keys by event id and
	// consumer group, so each group processes an event once; Global keys by
	// event id alone. Immutable: it is the table's primary key.
	// +optional
	// +kubebuilder:default=ConsumerGroup
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="scope is immutable: it is the table's primary key"
	Scope DedupScope `json:"scope,omitempty"`

	// retention is how long an event id is remembered, measured in the
	// producer's time (the UUID v7 timestamp of the event id), as a Go duration
	// in hours, minutes or seconds (168h is 7 days; days are not accepted).
	// Keep it at least the topic's retention plus any replay window, or a
	// replay of older events is processed twice. Default 168h.
	// +optional
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('87840h')",message="retention must be at most 87840h (10 years)"
	Retention *metav1.Duration `json:"retention,omitempty"`

	// interval is the time span one partition covers: Hourly, Daily (the
	// default), Weekly or Monthly. Immutable: existing partitions have its
	// bounds.
	// +optional
	// +kubebuilder:default=Daily
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="interval is immutable: existing partitions have its bounds"
	Interval PartitionInterval `json:"interval,omitempty"`

	// premake is how many partitions beyond the current one are kept ready,
	// so inserts keep working while the operator is down for up to that many
	// intervals. Default 4.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=90
	Premake int32 `json:"premake,omitempty"`

	// outOfWindowPolicy says what the consumer does with an event whose id is
	// older than the oldest partition or newer than the newest, so it cannot
	// be deduplicated: DeadLetter (the default), Skip, Stop (halt on it), or
	// Process (without deduplication).
	// +optional
	// +kubebuilder:default=DeadLetter
	OutOfWindowPolicy OutOfWindowPolicy `json:"outOfWindowPolicy,omitempty"`
}

// ConsumerSpec describes the consumer Deployment.
// +kubebuilder:validation:XValidation:rule="self.sink.type != 'None' || has(self.image)",message="sink type None needs a custom image that brings its own handler: set consumer.image, or choose sink type HTTP or SQL"
// +kubebuilder:validation:XValidation:rule="!has(self.ordering) || self.ordering == 'Partition' || self.sink.type == 'HTTP' || self.sink.type == 'None'",message="ordering Key and Unordered are for the HTTP sink (or a custom image, sink type None): the SQL sink runs in the dedup transaction and keeps Partition ordering, and so does Log"
type ConsumerSpec struct {
	// image of the consumer. Empty means the operator's default consumer
	// image (the project's ready-made consumer, cmd/consumer).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image,omitempty"`

	// imagePullPolicy of the consumer container.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// replicas of the consumer Deployment. More replicas than the topic has
	// partitions leaves some idle (ReplicasWithinPartitions says so). Also
	// settable through the scale subresource. Ignored while KEDA scales the
	// consumer (spec.autoscaling).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// sink says what the ready-made consumer does with each new event.
	// +required
	Sink SinkSpec `json:"sink"`

	// batch limits: how many messages per Kafka partition go into one
	// transaction and one offset commit.
	// +optional
	// +kubebuilder:default={}
	Batch BatchSpec `json:"batch,omitzero"`

	// ordering says which records of one Kafka partition the consumer may
	// process at the same time: Partition (one after another, in offset
	// order), Key (records with different Kafka keys concurrently, records
	// with the same key in offset order) or Unordered (any records
	// concurrently). In every mode the offset is committed only past records
	// that are done. Empty means the sink's default: Key for HTTP, Partition
	// for SQL and Log. The SQL sink accepts only Partition.
	// +optional
	Ordering Ordering `json:"ordering,omitempty"`

	// maxInFlight bounds the records one consumer pod processes at the same
	// time, across all its partitions (for the HTTP sink: the requests in
	// flight). Empty means the consumer's default, 64. The SQL sink, which
	// processes each partition in order, ignores it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`

	// resources of the consumer container. Empty means modest defaults
	// (requests 50m CPU and 64Mi memory, limit 256Mi memory). The consumer
	// sizes its Kafka prefetch and batches to half the memory limit and sets
	// the Go runtime's memory limit to 70% of it (docs/consumer.md, "Memory
	// budget"); without a memory limit it is sized to the node's memory.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// env adds environment variables to the consumer container. Variables the
	// operator sets (see docs/operator.md) cannot be overridden here.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// podTemplate overrides parts of the consumer's pod template.
	// +optional
	PodTemplate *PodTemplateOverrides `json:"podTemplate,omitempty"`
}

// SinkSpec is a union: type selects which of http or sql is set.
// +kubebuilder:validation:XValidation:rule="self.type == 'HTTP' ? has(self.http) : !has(self.http)",message="http must be set if and only if type is HTTP"
// +kubebuilder:validation:XValidation:rule="self.type == 'SQL' ? has(self.sql) : !has(self.sql)",message="sql must be set if and only if type is SQL"
type SinkSpec struct {
	// type of sink: HTTP, SQL, Log, or None (for a custom image with its own
	// handler).
	// +required
	Type SinkType `json:"type"`

	// http posts each new event to a URL with an Idempotency-Key header.
	// +optional
	HTTP *HTTPSinkSpec `json:"http,omitempty"`

	// sql runs one statement per new event in the dedup transaction.
	// +optional
	SQL *SQLSinkSpec `json:"sql,omitempty"`
}

// HTTPSinkSpec configures the HTTP sink.
type HTTPSinkSpec struct {
	// url the event is POSTed to.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	URL string `json:"url"`

	// timeout of one request. Default 10s.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// authorizationSecretRef selects a value sent as the Authorization header
	// (for example "Bearer <token>").
	// +optional
	AuthorizationSecretRef *SecretKeyRef `json:"authorizationSecretRef,omitempty"`
}

// SQLSinkSpec configures the SQL sink. The statement runs in the same
// transaction as the dedup insert, against the database of spec.database.
type SQLSinkSpec struct {
	// statement run once per new event, in the same transaction as the dedup
	// insert, so the business write and the dedup record commit together. The
	// parameters it receives (the event id, payload and Kafka coordinates) are
	// documented with the consumer in docs/consumer.md.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Statement string `json:"statement"`
}

// BatchSpec bounds one batch per Kafka partition.
type BatchSpec struct {
	// maxMessages per batch. Default 500.
	// +optional
	// +kubebuilder:default=500
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxMessages int32 `json:"maxMessages,omitempty"`

	// maxWait is how long a batch waits to fill before it is processed.
	// Default 200ms.
	// +optional
	// +kubebuilder:default="200ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1m')",message="maxWait must be at most 1m"
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`
}

// PodTemplateOverrides are the parts of the consumer pod template a user may
// set. The container, its security context and the operator's labels are not
// among them.
type PodTemplateOverrides struct {
	// labels added to the pods. The operator's own labels win on conflict.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// serviceAccountName the pods run as. Empty means the namespace's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// nodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity of the pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// topologySpreadConstraints of the pods.
	// +optional
	// +listType=atomic
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// priorityClassName of the pods.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// imagePullSecrets for the consumer image.
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// IdempotentConsumerStatus is what the operator observed on its last
// reconcile.
type IdempotentConsumerStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (the summary), DatabaseReady, PartitionsReady,
	// ConsumerReady, the kstatus conventions Reconciling and Stalled, and the
	// warnings TopicRetentionCovered, ReplicasWithinPartitions and
	// AutoscalingReady, which do not affect Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// table is the qualified name of the processed_event table.
	// +optional
	Table string `json:"table,omitempty"`

	// window is the dedup window the partitions cover now.
	// +optional
	Window *DedupWindow `json:"window,omitempty"`

	// partitions summarises the table's partitions.
	// +optional
	Partitions *PartitionsStatus `json:"partitions,omitempty"`

	// lastMaintenanceTime is when partition maintenance last ran on schedule
	// or last created or dropped a partition.
	// +optional
	LastMaintenanceTime *metav1.Time `json:"lastMaintenanceTime,omitempty"`

	// nextMaintenanceTime is when the operator will next maintain the
	// partitions: the next partition boundary or expiry, minus a lead time.
	// +optional
	NextMaintenanceTime *metav1.Time `json:"nextMaintenanceTime,omitempty"`

	// deploymentName is the consumer Deployment.
	// +optional
	DeploymentName string `json:"deploymentName,omitempty"`

	// replicas is the consumer Deployment's current replica count (for the
	// scale subresource).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the consumer Deployment's ready replica count.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// selector is the consumer pods' label selector (for the scale subresource).
	// +optional
	Selector string `json:"selector,omitempty"`

	// topic is what the operator last read from the brokers about
	// spec.kafka.topic and the dead-letter topic (re-read every few minutes at
	// most, on the reconciles that happen anyway).
	// +optional
	Topic *TopicStatus `json:"topic,omitempty"`

	// scaledObjectName is the KEDA ScaledObject the operator created for
	// spec.autoscaling, if any.
	// +optional
	ScaledObjectName string `json:"scaledObjectName,omitempty"`

	// consumerRole is the database role the operator last granted the
	// consumer's privileges to (spec.database.consumerURLSecretRef), and
	// the consumer group its policies admit: what it takes back when either
	// changes. Empty in the single-role setup.
	// +optional
	ConsumerRole *ConsumerRoleStatus `json:"consumerRole,omitempty"`
}

// ConsumerRoleStatus names the database role the consumer's privileges were
// granted to and the consumer group its policies admit.
type ConsumerRoleStatus struct {
	// role is the PostgreSQL role (the user of the consumer's URL).
	Role string `json:"role"`
	// group is the consumer group whose rows its policies admit.
	Group string `json:"group"`
}

// TopicStatus is what the brokers said about the topics.
type TopicStatus struct {
	// partitions of spec.kafka.topic.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// retention of spec.kafka.topic: its retention.ms as a duration, or
	// "Infinite" (retention.ms -1, or a compacted topic).
	// +optional
	Retention string `json:"retention,omitempty"`

	// deadLetterRetention is the same for the dead-letter topic; empty when
	// that topic does not exist yet.
	// +optional
	DeadLetterRetention string `json:"deadLetterRetention,omitempty"`

	// observedTime is when the brokers last answered.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// DedupWindow is the range of event times the partitions cover: [from, to).
type DedupWindow struct {
	// from is the lower bound of the oldest partition.
	From metav1.Time `json:"from"`
	// to is the upper bound of the newest partition.
	To metav1.Time `json:"to"`
	// summary is "from/to" as an ISO 8601 interval, for display.
	// +optional
	Summary string `json:"summary,omitempty"`
}

// PartitionsStatus summarises the table's partitions.
type PartitionsStatus struct {
	// count of partitions attached to the table.
	Count int32 `json:"count"`
	// ahead is how many partitions lie wholly in the future: the margin left
	// if maintenance stopped now.
	Ahead int32 `json:"ahead"`
	// oldest partition's name.
	// +optional
	Oldest string `json:"oldest,omitempty"`
	// newest partition's name.
	// +optional
	Newest string `json:"newest,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.consumer.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=ic;idc,categories=kafka
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Topic",type=string,JSONPath=`.spec.kafka.topic`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.kafka.groupID`
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.status.window.summary`
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.status.partitions.count`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters: it names the consumer Deployment and labels its pods"

// IdempotentConsumer is a Kafka consumer with an exactly-once effect: the
// operator creates and partitions its PostgreSQL processed_event table, keeps
// partitions premade and drops expired ones on schedule, and runs the consumer
// as a Deployment.
type IdempotentConsumer struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state.
	// +required
	Spec IdempotentConsumerSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status IdempotentConsumerStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// IdempotentConsumerList is a list of IdempotentConsumers.
type IdempotentConsumerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []IdempotentConsumer `json:"items"`
}
