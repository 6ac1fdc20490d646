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

// The Outbox kind: a transactional outbox table (consumer/outbox) the
// operator creates, partitions and grants, and the relay Deployment that
// publishes its committed rows to Kafka. A kind of its own, not a field of
// IdempotentConsumer: an outbox belongs to the producing service, which
// may consume nothing (an HTTP API); its relay has its own scale and
// credentials; its table, retention and topics are its own
// (docs/design.md, decision 12; docs/outbox.md, "Running it in
// Kubernetes").

// OutboxKafkaSpec says which brokers the relay publishes to, how it
// authenticates, and which topics the outbox's events go to.
// +kubebuilder:validation:XValidation:rule="has(self.bootstrapServers) != has(self.strimzi)",message="set exactly one of kafka.bootstrapServers and kafka.strimzi"
// +kubebuilder:validation:XValidation:rule="!has(self.strimzi) || (!has(self.tls) && !has(self.sasl))",message="with kafka.strimzi the operator wires the KafkaUser's Secret and the cluster CA: leave tls and sasl unset"
type OutboxKafkaSpec struct {
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
	// tls and sasl: the operator keeps a KafkaUser "<name>-outbox-relay"
	// for the relay, allowed to write to (and describe) exactly the topics
	// below, and wires its Secret and the cluster CA in. The topics are
	// not created (docs/platforms.md).
	// +optional
	Strimzi *StrimziCluster `json:"strimzi,omitempty"`

	// topics are the topics the outbox's events are emitted to. The
	// operator checks that each exists (KafkaReady) and compares the dedup
	// retention of the IdempotentConsumers of this namespace reading them
	// with this outbox's retention plus the topic's
	// (ConsumerRetentionCovered). The emit function refuses an event to any
	// other topic (SQLSTATE 22023). The relay publishes each row to the topic
	// the row names; a row naming a topic that does not exist (deleted after
	// the event was emitted) holds the relay at that row (docs/outbox.md,
	// "Bad input").
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=249
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9._-]+$`
	// +kubebuilder:validation:XValidation:rule="self.all(t, t != '.' && t != '..')",message="a topic must not be '.' or '..'"
	// +listType=set
	Topics []string `json:"topics"`

	// tls enables TLS to the brokers. Absent means plaintext.
	// +optional
	TLS *KafkaTLS `json:"tls,omitempty"`

	// sasl enables SASL authentication to the brokers.
	// +optional
	SASL *KafkaSASL `json:"sasl,omitempty"`
}

// OutboxDatabaseSpec says where the outbox table lives and which roles use
// it.
// +kubebuilder:validation:XValidation:rule="has(self.urlSecretRef) != has(self.cloudNativePG)",message="set exactly one of database.urlSecretRef and database.cloudNativePG"
// +kubebuilder:validation:XValidation:rule="has(self.cloudNativePG) == has(oldSelf.cloudNativePG)",message="database.cloudNativePG cannot be added or removed: another database has none of this outbox's unpublished events"
// +kubebuilder:validation:XValidation:rule="!has(self.cloudNativePG) || (!has(self.relayURLSecretRef) && !has(self.caSecretRef))",message="with database.cloudNativePG the operator takes the relay URL and CA from the cluster: leave relayURLSecretRef and caSecretRef unset"
type OutboxDatabaseSpec struct {
	// urlSecretRef selects a Secret key holding a PostgreSQL connection URL
	// whose role runs the outbox's DDL (it owns the table), as
	// spec.database.urlSecretRef of an IdempotentConsumer. It reaches the
	// relay pods only when relayURLSecretRef is absent. Immutable: another
	// Secret may point at another database, where this outbox's unpublished
	// events are not. Exactly one of urlSecretRef and cloudNativePG.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="database.urlSecretRef is immutable: another Secret may point at another database, without this outbox's unpublished events; rotate credentials by changing the Secret's value"
	URLSecretRef SecretKeyRef `json:"urlSecretRef,omitzero"`

	// cloudNativePG names a CloudNativePG Cluster (and optionally a Pooler
	// in session mode) instead of URL Secrets, as for an
	// IdempotentConsumer (docs/platforms.md). Exactly one of urlSecretRef
	// and cloudNativePG; neither can be swapped for the other.
	// +optional
	CloudNativePG *OutboxCloudNativePGSpec `json:"cloudNativePG,omitempty"`

	// relayURLSecretRef selects a Secret key holding the connection URL the
	// relay pods use, as a role of their own (CREATE ROLE ... LOGIN; it
	// needs no privilege of its own). The operator reads the role's name
	// from the URL's user, never connects with it, and grants it only what
	// the relay needs: USAGE on the schema, SELECT on the table, SELECT and
	// UPDATE on its cursor table <table>_relay. Same database as
	// urlSecretRef. Absent: the relay uses urlSecretRef (one role for
	// everything, fine for development).
	// +optional
	RelayURLSecretRef *SecretKeyRef `json:"relayURLSecretRef,omitempty"`

	// emitterRoles are the database roles of the services that write
	// events: each is granted USAGE on the schema, INSERT of the event's
	// columns only and EXECUTE on the emit function <schema>.<table>_emit;
	// no SELECT, UPDATE or DELETE. The roles must exist.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z_][a-zA-Z0-9_$-]*$`
	// +kubebuilder:validation:XValidation:rule="self.all(r, r.lowerAscii() != 'public' && r.lowerAscii() != 'none' && !r.lowerAscii().startsWith('pg_'))",message="spec.database.emitterRoles: public (every role), none and the predefined pg_ roles are refused; name the services' own roles"
	EmitterRoles []string `json:"emitterRoles,omitempty"`

	// caSecretRef selects a PEM CA bundle to verify the PostgreSQL server's
	// certificate with, as for an IdempotentConsumer: the operator verifies
	// with it in memory, the relay pods get it mounted with PGSSLROOTCERT
	// and PGSSLMODE=verify-full.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`

	// schema holding the table. Created if missing. Immutable.
	// +optional
	// +kubebuilder:default=public
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="schema is immutable: create a new Outbox to move the table"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('pg_') && self != 'information_schema'",message="schema must not be a system schema (pg_*, information_schema)"
	// +kubebuilder:validation:XValidation:rule="!(self in ['all','analyse','analyze','and','any','array','as','asc','asymmetric','authorization','binary','both','case','cast','check','collate','collation','column','concurrently','constraint','create','cross','current_catalog','current_date','current_role','current_schema','current_time','current_timestamp','current_user','default','deferrable','desc','distinct','do','else','end','except','false','fetch','for','foreign','freeze','from','full','grant','group','having','ilike','in','initially','inner','intersect','into','is','isnull','join','lateral','leading','left','like','limit','localtime','localtimestamp','natural','not','notnull','null','offset','on','only','or','order','outer','overlaps','placing','primary','references','returning','right','select','session_user','similar','some','symmetric','system_user','table','tablesample','then','to','trailing','true','union','unique','user','using','variadic','verbose','when','where','window','with'])",message="schema must not be a PostgreSQL reserved word"
	Schema string `json:"schema,omitempty"`

	// table is the name of the partitioned outbox table; beside it the
	// operator makes <table>_relay (the relay's cursor) and the function
	// <table>_emit. At most 51 bytes, and schema and table together at
	// most 62 (they name the NOTIFY channel). Immutable.
	// +optional
	// +kubebuilder:default=outbox
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=51
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="table is immutable: create a new Outbox for a new table"
	// +kubebuilder:validation:XValidation:rule="!(self in ['all','analyse','analyze','and','any','array','as','asc','asymmetric','authorization','binary','both','case','cast','check','collate','collation','column','concurrently','constraint','create','cross','current_catalog','current_date','current_role','current_schema','current_time','current_timestamp','current_user','default','deferrable','desc','distinct','do','else','end','except','false','fetch','for','foreign','freeze','from','full','grant','group','having','ilike','in','initially','inner','intersect','into','is','isnull','join','lateral','leading','left','like','limit','localtime','localtimestamp','natural','not','notnull','null','offset','on','only','or','order','outer','overlaps','placing','primary','references','returning','right','select','session_user','similar','some','symmetric','system_user','table','tablesample','then','to','trailing','true','union','unique','user','using','variadic','verbose','when','where','window','with'])",message="table must not be a PostgreSQL reserved word"
	Table string `json:"table,omitempty"`
}

// OutboxPartitioning is the outbox table's partitioning and retention.
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.interval) || duration(self.retention) >= (self.interval == 'Hourly' ? duration('1h') : self.interval == 'Daily' ? duration('24h') : self.interval == 'Weekly' ? duration('168h') : duration('744h'))",message="retention must be at least one partition interval (Hourly 1h, Daily 24h, Weekly 168h, Monthly 744h)"
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.interval) || self.interval != 'Hourly' || duration(self.retention) <= duration('1920h')",message="with Hourly partitions retention must be at most 1920h (80 days), or the table gets too many partitions; use Daily"
type OutboxPartitioning struct {
	// interval is the time span one partition covers (of the event ids'
	// UUID v7 time): Hourly, Daily (the default), Weekly or Monthly.
	// Immutable: existing partitions have its bounds.
	// +optional
	// +kubebuilder:default=Daily
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="interval is immutable: existing partitions have its bounds"
	Interval PartitionInterval `json:"interval,omitempty"`

	// premake is how many partitions beyond the current one are kept
	// ready, so emits keep working while the operator is down for up to
	// that many intervals. Default 4.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=90
	Premake int32 `json:"premake,omitempty"`

	// retention: a partition is dropped once its range ended this long ago
	// AND every row in it is published; a partition holding an unpublished
	// row is kept however old. A Go duration in hours, minutes or seconds.
	// Default 168h. The IdempotentConsumers reading this outbox's topics
	// should remember event ids at least this long plus the topic's
	// retention (ConsumerRetentionCovered).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('87840h')",message="retention must be at most 87840h (10 years)"
	Retention *metav1.Duration `json:"retention,omitempty"`
}

// OutboxRelaySpec describes the relay Deployment (`consumer outbox-relay`).
type OutboxRelaySpec struct {
	// image of the relay: an image of the ready-made consumer (cmd/consumer),
	// which runs the relay as its outbox-relay subcommand. Empty means the
	// operator's default consumer image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image,omitempty"`

	// imagePullPolicy of the relay container.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// replicas of the relay. One owns the stream at a time (an advisory
	// lock, fenced); the others stand by and take over. Default 2; 0 stops
	// publishing (the backlog grows).
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	Replicas *int32 `json:"replicas,omitempty"`

	// publishTimeout bounds one publish call; a new owner waits twice this
	// before publishing. Default 5s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('5m')",message="publishTimeout must be between 100ms and 5m"
	PublishTimeout *metav1.Duration `json:"publishTimeout,omitempty"`

	// pollInterval is how often the relay looks for rows when no
	// notification came, and how often a standby tries the ownership lock:
	// it also sets how soon a standby takes over (and an owner whose
	// session failed waits two of it before it connects again). Default
	// 1s, at most 1m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms') && duration(self) <= duration('1m')",message="pollInterval must be between 10ms and 1m: it also sets how soon a standby relay takes over"
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`

	// batchSize bounds the rows of one publish. Default 500.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	BatchSize *int32 `json:"batchSize,omitempty"`

	// maxMessageBytes is the largest record the relay sends; keep it at or
	// below the brokers' message.max.bytes and the topics'
	// max.message.bytes. The emit function refuses an event whose record
	// would be larger (SQLSTATE 54000), so it never holds the stream.
	// Default 1048576.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=104857600
	MaxMessageBytes *int32 `json:"maxMessageBytes,omitempty"`

	// resources of the relay container. Empty means requests 50m CPU and
	// 64Mi memory, limit 256Mi memory.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// podTemplate overrides parts of the relay's pod template, as for the
	// consumer.
	// +optional
	PodTemplate *PodTemplateOverrides `json:"podTemplate,omitempty"`
}

// OutboxSpec declares a transactional outbox: its table, the roles that
// write and relay it, and the relay that publishes it to Kafka.
type OutboxSpec struct {
	// kafka says where the relay publishes.
	// +required
	Kafka OutboxKafkaSpec `json:"kafka"`

	// database says which PostgreSQL database and table hold the outbox.
	// +required
	Database OutboxDatabaseSpec `json:"database"`

	// partitioning is the table's partitioning and retention policy.
	// +optional
	// +kubebuilder:default={}
	Partitioning OutboxPartitioning `json:"partitioning,omitzero"`

	// relay describes the relay Deployment.
	// +optional
	// +kubebuilder:default={}
	Relay OutboxRelaySpec `json:"relay,omitzero"`

	// suspend stops reconciliation: no DDL, no grants, no change to the
	// relay Deployment (which keeps running). Partition maintenance stops
	// too.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// OutboxCursor is the relay's cursor (the one row of <table>_relay): every
// row of a transaction below lo is published; [lo, hi) is the open window
// of transaction ids, published up to event id after.
type OutboxCursor struct {
	// lo: every committed row of a transaction id below it is published.
	Lo string `json:"lo"`
	// hi is the end of the open window (lo when none is open).
	Hi string `json:"hi"`
	// after is the last event id published in the open window, if any.
	// +optional
	After string `json:"after,omitempty"`
	// updatedTime is when the relay last moved the cursor.
	// +optional
	UpdatedTime *metav1.Time `json:"updatedTime,omitempty"`
}

// OutboxTopicStatus is what the brokers said about one of spec.kafka.topics.
type OutboxTopicStatus struct {
	// name of the topic.
	Name string `json:"name"`
	// exists: the brokers know the topic.
	Exists bool `json:"exists"`
	// partitions of the topic.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`
	// retention of the topic: its retention.ms as a duration, or
	// "Infinite".
	// +optional
	Retention string `json:"retention,omitempty"`
	// maxMessageBytes is the topic's max.message.bytes: the largest record
	// it takes. Below spec.relay.maxMessageBytes, the operator warns (an
	// event between the two would hold the relay's stream).
	// +optional
	MaxMessageBytes int64 `json:"maxMessageBytes,omitempty"`
}

// OutboxStatus is what the operator observed on its last reconcile.
type OutboxStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (DatabaseReady, PartitionsReady, KafkaReady and
	// RelayReady all True), those four, and the warning
	// ConsumerRetentionCovered, which does not affect Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// table is the qualified name of the outbox table.
	// +optional
	Table string `json:"table,omitempty"`

	// emitFunction is the SQL function that writes one event in the
	// caller's transaction: SELECT <emitFunction>(topic, key, payload,
	// headers, traceparent).
	// +optional
	EmitFunction string `json:"emitFunction,omitempty"`

	// backlog is the number of committed rows not yet published, as read
	// at statsTime.
	// +optional
	Backlog *int64 `json:"backlog,omitempty"`

	// oldestUnpublishedTime is when the oldest row not yet published was
	// written; absent when the backlog is empty.
	// +optional
	OldestUnpublishedTime *metav1.Time `json:"oldestUnpublishedTime,omitempty"`

	// cursor is the relay's cursor.
	// +optional
	Cursor *OutboxCursor `json:"cursor,omitempty"`

	// statsTime is when backlog, oldestUnpublishedTime and cursor were
	// read.
	// +optional
	StatsTime *metav1.Time `json:"statsTime,omitempty"`

	// partitions summarises the table's partitions.
	// +optional
	Partitions *PartitionsStatus `json:"partitions,omitempty"`

	// lastMaintenanceTime is when partition maintenance last ran.
	// +optional
	LastMaintenanceTime *metav1.Time `json:"lastMaintenanceTime,omitempty"`

	// topics is what the brokers last said about spec.kafka.topics.
	// +optional
	// +listType=atomic
	Topics []OutboxTopicStatus `json:"topics,omitempty"`

	// deploymentName is the relay Deployment.
	// +optional
	DeploymentName string `json:"deploymentName,omitempty"`

	// replicas is the relay Deployment's replica count.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the relay Deployment's ready replica count.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// relayRole is the database role last granted the relay's privileges
	// (the user of spec.database.relayURLSecretRef); empty in the
	// single-role setup. When it changes, the former one's are revoked.
	// +optional
	RelayRole string `json:"relayRole,omitempty"`

	// platform: the CloudNativePG and Strimzi objects and Secrets the
	// operator used (spec.database.cloudNativePG, spec.kafka.strimzi).
	// +optional
	Platform *PlatformStatus `json:"platform,omitempty"`

	// emitterRoles are the roles last granted emit access
	// (spec.database.emitterRoles); a role removed from the spec has it
	// revoked.
	// +optional
	// +listType=set
	EmitterRoles []string `json:"emitterRoles,omitempty"`

	// retiringTopics are topics removed from spec.kafka.topics (with
	// spec.kafka.strimzi) whose events may not all be published yet: the
	// relay's KafkaUser keeps their ACLs until its cursor has passed every
	// transaction that could have emitted to them. The emit function
	// refuses new events to them at once.
	// +optional
	// +listType=map
	// +listMapKey=name
	RetiringTopics []OutboxRetiringTopic `json:"retiringTopics,omitempty"`
}

// OutboxRetiringTopic is a topic removed from spec.kafka.topics that the
// relay may still have events for.
type OutboxRetiringTopic struct {
	// name of the topic.
	Name string `json:"name"`

	// sinceTime is when the operator first saw the topic removed.
	SinceTime metav1.Time `json:"sinceTime"`

	// until is a transaction id (xid8, in decimal) the operator took after
	// the table's topic check stopped taking the topic: every row for the
	// topic is from a transaction below it. The topic is published when the
	// relay's cursor (status.cursor.lo) reaches it, or when every
	// transaction below it has ended and none of its rows is unpublished.
	// Empty until then.
	// +optional
	Until string `json:"until,omitempty"`

	// published: every event emitted to the topic is published; its ACL
	// is being removed from the KafkaUser, and the entry goes once it is.
	// +optional
	Published bool `json:"published,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=obx,categories=kafka
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Table",type=string,JSONPath=`.status.table`,priority=1
// +kubebuilder:printcolumn:name="Backlog",type=integer,JSONPath=`.status.backlog`
// +kubebuilder:printcolumn:name="Oldest",type=date,JSONPath=`.status.oldestUnpublishedTime`
// +kubebuilder:printcolumn:name="Relays",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 50",message="metadata.name must be at most 50 characters: it names the relay Deployment (name-outbox-relay) and labels its pods"

// Outbox is a transactional outbox: the operator creates its PostgreSQL
// table (insert-only, range-partitioned on the UUID v7 event id), keeps its
// partitions, grants the emitting and relaying roles least privilege, and
// runs the relay that publishes the committed rows to Kafka in commit order
// per key. Its status shows the backlog, the oldest unpublished event and
// the relay's cursor.
type Outbox struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the desired state.
	// +required
	Spec OutboxSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status OutboxStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// OutboxList is a list of Outboxes.
type OutboxList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []Outbox `json:"items"`
}
