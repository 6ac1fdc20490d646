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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The spec's kafka, database, dedup and autoscaling sections.

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
// +kubebuilder:validation:XValidation:rule="has(self.bootstrapServers) != has(self.strimzi)",message="set exactly one of kafka.bootstrapServers and kafka.strimzi"
// +kubebuilder:validation:XValidation:rule="!has(self.strimzi) || (!has(self.tls) && !has(self.sasl))",message="with kafka.strimzi the operator wires the KafkaUser's Secret and the cluster CA: leave tls and sasl unset"
type KafkaSpec struct {
	// bootstrapServers are the brokers to bootstrap from, as host:port.
	// Exactly one of bootstrapServers and strimzi.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^(\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?):[0-9]{1,5}$`
	// +listType=set
	BootstrapServers []string `json:"bootstrapServers,omitempty"`

	// strimzi names a Strimzi Kafka cluster instead of bootstrapServers,
	// tls and sasl: the operator keeps a KafkaUser (and the dead-letter
	// KafkaTopic) for this consumer and wires their Secrets in
	// (docs/platforms.md).
	// +optional
	Strimzi *StrimziSpec `json:"strimzi,omitempty"`

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
// +kubebuilder:validation:XValidation:rule="has(self.urlSecretRef) != has(self.cloudNativePG)",message="set exactly one of database.urlSecretRef and database.cloudNativePG"
// +kubebuilder:validation:XValidation:rule="has(self.cloudNativePG) == has(oldSelf.cloudNativePG)",message="database.cloudNativePG cannot be added or removed: another database has none of this object's dedup history"
// +kubebuilder:validation:XValidation:rule="!has(self.cloudNativePG) || (!has(self.consumerURLSecretRef) && !has(self.caSecretRef))",message="with database.cloudNativePG the operator takes the consumer URL and CA from the cluster: leave consumerURLSecretRef and caSecretRef unset"
type DatabaseSpec struct {
	// urlSecretRef selects a Secret key holding a PostgreSQL connection URL
	// (postgres://user:password@host:5432/db?sslmode=require). The operator uses
	// it for DDL (its role owns the table), and the consumer for its
	// transactions unless consumerURLSecretRef gives it a role of its own;
	// it never appears in the object, in logs or in events.
	//
	// Immutable: another Secret may point at another database, where this
	// object's dedup history does not exist, and every event still in the
	// topic would be processed again. Rotate credentials by changing the
	// Secret's value; to move to another database create a new object.
	// Exactly one of urlSecretRef and cloudNativePG.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="database.urlSecretRef is immutable: another Secret may point at another database, without this object's dedup history, and every event still in the topic would be processed again. Rotate credentials by changing the Secret's value; to move to another database create a new IdempotentConsumer (docs/runbooks.md)"
	URLSecretRef SecretKeyRef `json:"urlSecretRef,omitzero"`

	// cloudNativePG names a CloudNativePG Cluster (and optionally a Pooler)
	// instead of URL Secrets (docs/platforms.md). Exactly one of
	// urlSecretRef and cloudNativePG; neither can be swapped for the other.
	// +optional
	CloudNativePG *CloudNativePGSpec `json:"cloudNativePG,omitempty"`

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
// +kubebuilder:validation:XValidation:rule="!has(self.sharing) || self.sharing != 'Shared' || !has(self.scope) || self.scope == 'ConsumerGroup'",message="sharing Shared needs scope ConsumerGroup: each object's rows are told apart by its consumer group"
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
	//
	// Lowering it can be taken back: the API server warns on the change
	// (a ValidatingAdmissionPolicy installed with the CRD), status.retention
	// says which partitions the decrease will drop and when, a Warning Event
	// (RetentionDecreasePending) is emitted, and the partitions that only the
	// decrease made expired are kept for retentionDecreaseGrace (default 1h)
	// before they are dropped. Raising it back within that time keeps every
	// partition. Increases, and partitions that expire under the previous
	// retention, take effect at once as before.
	// +optional
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('87840h')",message="retention must be at most 87840h (10 years)"
	Retention *metav1.Duration `json:"retention,omitempty"`

	// retentionDecreaseGrace is how long, after a decrease of retention is
	// seen, the partitions that only the decrease made expired are kept
	// before they are dropped; raising retention back within it keeps them
	// all. A further decrease starts the grace again. Default 1h; at least
	// 10m (time to notice the warning and revert), at most 720h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10m') && duration(self) <= duration('720h')",message="retentionDecreaseGrace must be between 10m and 720h"
	RetentionDecreaseGrace *metav1.Duration `json:"retentionDecreaseGrace,omitempty"`

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

	// sharing says whether other IdempotentConsumers, each with its own
	// consumer group, may use this object's table. Exclusive (the default):
	// the table belongs to this object alone, and another object naming it
	// is refused (TableClaimedByAnotherObject). Shared: every object that
	// names the table with sharing Shared registers in the table's registry
	// (<table>_users) and uses it with its own consumer group; each
	// maintains the partitions (the passes are idempotent, under the table's
	// lock) with the longest retention and the largest premake registered;
	// deleting one unregisters it, and the table is dropped only when the
	// last one leaves with deletionPolicy Delete. Needs scope ConsumerGroup.
	// Exclusive can change to Shared (the table's ownership marker then
	// names the shared table instead of this object), never back.
	// +optional
	// +kubebuilder:default=Exclusive
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || oldSelf == 'Exclusive'",message="sharing cannot change from Shared back to Exclusive: other objects may be registered on the table. Delete the other objects first and create a new object, or keep Shared"
	Sharing TableSharing `json:"sharing,omitempty"`
}
