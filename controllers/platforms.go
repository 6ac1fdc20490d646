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
	"fmt"
	"maps"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/envvars"
	"github.com/idempotency-dev/operator/controllers/objects"
)

// Platform integrations (docs/platforms.md), for IdempotentConsumers and
// Outboxes alike. Before the phases run, the CloudNativePG and Strimzi
// references are resolved into the refs the rest of the reconciler already
// understands (urlSecretRef, caSecretRef, consumerURLSecretRef or
// relayURLSecretRef, bootstrapServers, tls, sasl), in memory only: the
// object's spec is never written. Every later phase, the operator's own
// Kafka admin connection included, and the Deployment then use them.
//
// Kinds are looked up when used, through the client's lazy REST mapper: a
// CRD installed after the manager started is found without a restart, and
// nothing is watched, so a manager without these CRDs starts unchanged. A
// wait (KafkaUser not Ready) polls.

// +kubebuilder:rbac:groups=postgresql.cnpg.io,resources=clusters;poolers,verbs=get
// +kubebuilder:rbac:groups=kafka.strimzi.io,resources=kafkas,verbs=get
// +kubebuilder:rbac:groups=kafka.strimzi.io,resources=kafkausers;kafkatopics,verbs=get;create;update;patch;delete

var (
	cnpgClusterGVK  = schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Cluster"}
	cnpgPoolerGVK   = schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Pooler"}
	strimziKafkaGVK = schema.GroupVersionKind{Group: "kafka.strimzi.io", Version: "v1beta2", Kind: "Kafka"}
	strimziUserGVK  = schema.GroupVersionKind{Group: "kafka.strimzi.io", Version: "v1beta2", Kind: "KafkaUser"}
	strimziTopicGVK = schema.GroupVersionKind{Group: "kafka.strimzi.io", Version: "v1beta2", Kind: "KafkaTopic"}
)

// platformPollInterval is how often a platform wait is looked at again.
const platformPollInterval = 10 * time.Second

// PlatformSecretName is the Secret the operator keeps with what it derives
// for the platform integrations: "uri" (the consumer's CloudNativePG URL)
// and "username" (the KafkaUser's name, for SCRAM).
func PlatformSecretName(obj *kafkav1alpha1.IdempotentConsumer) string {
	return obj.Name + "-platform"
}

// StrimziTopicName is the dead-letter KafkaTopic's object name.
func StrimziTopicName(obj *kafkav1alpha1.IdempotentConsumer) string {
	return obj.Name + "-dead-letter"
}

// platformSpec is what the platform integrations need of an object, of
// either kind (IdempotentConsumer, Outbox): the references, and the names
// and ACLs of what the operator keeps for the object's pods.
type platformSpec struct {
	owner client.Object // controls the KafkaUser, KafkaTopic and derived Secret
	cnpg  *kafkav1alpha1.CloudNativePGCluster
	// podRole is the managed role the pods connect as (an
	// IdempotentConsumer's consumerRole, an Outbox's relayRole).
	podRole *kafkav1alpha1.CloudNativePGRole
	// podRoleWhat names the role in messages ("the consumer role").
	podRoleWhat string
	strimzi     *kafkav1alpha1.StrimziCluster
	// kafkaUser is the KafkaUser's name, and its Secret's.
	kafkaUser string
	// derivedSecret holds the derived values ("uri", "username").
	derivedSecret string
	acls          []any
	// deadLetterTopic, when set, is a KafkaTopic to keep beside the
	// KafkaUser (IdempotentConsumer only).
	deadLetterTopic *strimziTopic
}

// strimziTopic is a KafkaTopic the operator keeps: its object name and spec.
type strimziTopic struct {
	name string
	spec map[string]any
}

// used reports whether the object names CloudNativePG or Strimzi.
func (p platformSpec) used() bool { return p.cnpg != nil || p.strimzi != nil }

// secretNames are the Secrets the platform integrations read, known from the
// spec alone (for the Secret watch): a change to one, or its creation,
// reconciles the object at once.
func (p platformSpec) secretNames() []string {
	var names []string
	if c := p.cnpg; c != nil {
		names = append(names, c.Cluster+"-app", c.Cluster+"-ca")
		if p.podRole != nil {
			names = append(names, p.podRole.SecretRef.Name)
		}
	}
	if sz := p.strimzi; sz != nil {
		names = append(names, p.kafkaUser, sz.Cluster+"-cluster-ca-cert", p.derivedSecret)
	}
	return names
}

// consumerPlatform is an IdempotentConsumer's platformSpec.
func consumerPlatform(obj *kafkav1alpha1.IdempotentConsumer) platformSpec {
	p := platformSpec{owner: obj, podRoleWhat: "the consumer role", kafkaUser: obj.Name, derivedSecret: PlatformSecretName(obj)}
	if c := obj.Spec.Database.CloudNativePG; c != nil {
		p.cnpg, p.podRole = &c.CloudNativePGCluster, c.ConsumerRole
	}
	if sz := obj.Spec.Kafka.Strimzi; sz != nil {
		p.strimzi = &sz.StrimziCluster
		p.acls = strimziACLs(obj)
		if k := obj.Spec.Kafka; k.DeadLetterTopic != "" {
			p.deadLetterTopic = deadLetterKafkaTopic(obj)
		}
	}
	return p
}

// platformSecretNames are an IdempotentConsumer's platform Secrets (for the
// Secret watch's index).
func platformSecretNames(obj *kafkav1alpha1.IdempotentConsumer) []string {
	return consumerPlatform(obj).secretNames()
}

// platformResult is what resolving a platformSpec found: the refs the rest
// of a reconciler understands, status.platform, and the first problem.
type platformResult struct {
	// set from the CloudNativePG Cluster (urlSecretRef, caSecretRef, and the
	// pods' own URL when a role or Pooler is named)
	databaseURL *kafkav1alpha1.SecretKeyRef
	databaseCA  *kafkav1alpha1.SecretKeyRef
	podURL      *kafkav1alpha1.SecretKeyRef
	poolMode    string
	// set from the Strimzi Kafka and the KafkaUser
	brokers []string
	tls     *kafkav1alpha1.KafkaTLS
	sasl    *kafkav1alpha1.KafkaSASL

	status *kafkav1alpha1.PlatformStatus
	prob   *problem
	// kafkaProblem: prob is Strimzi's, not CloudNativePG's.
	kafkaProblem bool
}

// platformClient reads the platform objects and keeps the operator's own;
// both reconcilers make one from their clients.
type platformClient struct {
	client client.Client
	reader client.Reader // Secrets and other operators' objects: not cached
}

// resolve reads the platform objects p names and, when write, keeps the
// KafkaUser (KafkaTopic) and the derived Secret. The refs found are filled
// in as far as they were found, even with a problem (deletion reads the
// database refs when the Cluster is gone).
func (pc platformClient) resolve(ctx context.Context, p platformSpec, write bool) (platformResult, error) {
	res := platformResult{}
	st := &kafkav1alpha1.PlatformStatus{}
	derived := map[string][]byte{}
	if p.cnpg != nil {
		prob, err := pc.resolveCNPG(ctx, p, &res, st, derived)
		if err != nil || prob != nil {
			res.prob = prob
			return res, err
		}
	}
	var kafkaProb *problem
	if p.strimzi != nil {
		prob, err := pc.resolveStrimzi(ctx, p, &res, st, derived, write)
		if err != nil {
			return res, err
		}
		kafkaProb = prob
	}
	// Kept during a Strimzi wait too: the database phases go on then, and
	// the pod role's URL is read from it.
	if write && len(derived) > 0 {
		prob, err := pc.applyPlatformSecret(ctx, p.owner, p.derivedSecret, derived)
		if err != nil || prob != nil {
			res.prob = prob
			return res, err
		}
	}
	if kafkaProb != nil {
		res.prob, res.kafkaProblem = kafkaProb, true
		return res, nil
	}
	res.status = st
	return res, nil
}

// resolvePlatforms fills obj's spec in memory from the platform objects and
// sets status.platform. A problem says why it could not (yet); kafka says it
// is Strimzi's (the database refs are resolved).
func (r *IdempotentConsumerReconciler) resolvePlatforms(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, write bool) (prob *problem, kafka bool, err error) {
	p := consumerPlatform(obj)
	if !p.used() {
		obj.Status.Platform = nil
		return nil, false, nil
	}
	res, err := platformClient{r.Client, r.APIReader}.resolve(ctx, p, write)
	d, k := &obj.Spec.Database, &obj.Spec.Kafka
	if res.databaseURL != nil {
		d.URLSecretRef, d.CASecretRef = *res.databaseURL, res.databaseCA
	}
	if res.podURL != nil {
		d.ConsumerURLSecretRef = res.podURL
	}
	// CloudNativePG's default pool mode is session: a server to the
	// consumer. In transaction mode the runtime must be told
	// (docs/database-secrets.md); a value the user set wins.
	if res.poolMode == "transaction" && !hasEnv(obj.Spec.Consumer.Env, envvars.DatabasePooler) {
		obj.Spec.Consumer.Env = append(obj.Spec.Consumer.Env, corev1.EnvVar{Name: envvars.DatabasePooler, Value: "transaction"})
	}
	if res.brokers != nil {
		k.BootstrapServers, k.TLS, k.SASL = res.brokers, res.tls, res.sasl
	}
	if err != nil || res.prob != nil {
		return res.prob, res.kafkaProblem, err
	}
	obj.Status.Platform = res.status
	return nil, false, nil
}

// getPlatformObject reads another operator's object; a kind that is not
// installed and an object that does not exist are problems.
func (pc platformClient) getPlatformObject(ctx context.Context, gvk schema.GroupVersionKind, namespace, name, notFoundReason string) (*unstructured.Unstructured, *problem, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := pc.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u)
	switch {
	case err == nil:
		return u, nil, nil
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err) && isNoKindError(err):
		return nil, &problem{kafkav1alpha1.ReasonPlatformKindAbsent, fmt.Sprintf(
			"%s (%s) is not installed in this cluster: install its operator's CRDs (docs/platforms.md)", gvk.Kind, gvk.GroupVersion())}, nil
	case apierrors.IsNotFound(err):
		return nil, &problem{notFoundReason, fmt.Sprintf("%s %q not found in namespace %q", gvk.Kind, name, namespace)}, nil
	}
	return nil, nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, namespace, name, err)
}

// isNoKindError: a 404 for the resource itself (the API group is served but
// not the resource) rather than for the object.
func isNoKindError(err error) bool {
	var status apierrors.APIStatus
	if s, ok := err.(apierrors.APIStatus); ok {
		status = s
	} else {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

func (pc platformClient) resolveCNPG(ctx context.Context, p platformSpec, res *platformResult, st *kafkav1alpha1.PlatformStatus, derived map[string][]byte) (*problem, error) {
	c, ns := p.cnpg, p.owner.GetNamespace()
	appName, caName := c.Cluster+"-app", c.Cluster+"-ca"
	// Set first: deletion reads them even when the Cluster is gone.
	res.databaseURL = &kafkav1alpha1.SecretKeyRef{Name: appName, Key: "uri"}
	res.databaseCA = &kafkav1alpha1.SecretKeyRef{Name: caName, Key: "ca.crt"}
	cluster, prob, err := pc.getPlatformObject(ctx, cnpgClusterGVK, ns, c.Cluster, kafkav1alpha1.ReasonCNPGClusterNotFound)
	if err != nil || prob != nil {
		return prob, err
	}
	writeService, _, _ := unstructured.NestedString(cluster.Object, "status", "writeService")
	if writeService == "" {
		writeService = c.Cluster + "-rw"
	}
	app, prob, err := pc.readCNPGSecret(ctx, ns, appName, "the Cluster's application owner Secret")
	if err != nil || prob != nil {
		return prob, err
	}
	if _, prob, err := pc.readCNPGSecret(ctx, ns, caName, "the Cluster's CA Secret"); err != nil || prob != nil {
		return prob, err
	}
	port := string(app.Data["port"])
	if port == "" {
		port = "5432"
	}
	ddlHost := string(app.Data["host"])
	if ddlHost == "" {
		ddlHost = writeService
	}
	ds := &kafkav1alpha1.PlatformDatabaseStatus{OwnerSecret: appName, CASecret: caName, DDLEndpoint: net.JoinHostPort(ddlHost, port)}
	st.Database = ds

	if p.podRole == nil && c.Pooler == "" {
		return nil, nil
	}
	podHost := ddlHost
	if c.Pooler != "" {
		pooler, prob, err := pc.getPlatformObject(ctx, cnpgPoolerGVK, ns, c.Pooler, kafkav1alpha1.ReasonCNPGClusterNotFound)
		if err != nil || prob != nil {
			return prob, err
		}
		if name, _, _ := unstructured.NestedString(pooler.Object, "spec", "cluster", "name"); name != c.Cluster {
			return &problem{kafkav1alpha1.ReasonCNPGClusterNotFound, fmt.Sprintf("Pooler %q is for Cluster %q, not %q", c.Pooler, name, c.Cluster)}, nil
		}
		podHost = c.Pooler // the Pooler's Service is named after it
		port = "5432"
		mode, _, _ := unstructured.NestedString(pooler.Object, "spec", "pgbouncer", "poolMode")
		if mode == "" {
			mode = "session"
		}
		ds.ConsumerPoolMode = mode
		res.poolMode = mode
	}
	user, password := string(app.Data["username"]), string(app.Data["password"])
	if user == "" {
		user = string(app.Data["user"])
	}
	ds.ConsumerSecret = appName
	if role := p.podRole; role != nil {
		sec, prob, err := pc.readCNPGSecret(ctx, ns, role.SecretRef.Name, p.podRoleWhat+"'s Secret")
		if err != nil || prob != nil {
			return prob, err
		}
		user, password = role.Name, string(sec.Data["password"])
		ds.ConsumerSecret = role.SecretRef.Name
	}
	u := url.URL{Scheme: "postgresql", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(podHost, port), Path: "/" + string(app.Data["dbname"])}
	derived["uri"] = []byte(u.String())
	res.podURL = &kafkav1alpha1.SecretKeyRef{Name: p.derivedSecret, Key: "uri"}
	ds.ConsumerEndpoint = u.Host
	return nil, nil
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

func (pc platformClient) readCNPGSecret(ctx context.Context, namespace, name, what string) (*corev1.Secret, *problem, error) {
	var sec corev1.Secret
	if err := pc.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &problem{kafkav1alpha1.ReasonCNPGSecretNotFound, fmt.Sprintf(
				"Secret %q (%s) not found in namespace %q: CloudNativePG creates it with the Cluster", name, what, namespace)}, nil
		}
		return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	return &sec, nil, nil
}

// strimziACL is one simple-authorization ACL rule of a KafkaUser: the
// operations on one literal resource.
func strimziACL(typ, name string, ops ...string) any {
	o := make([]any, len(ops))
	for i, op := range ops {
		o[i] = op
	}
	return map[string]any{
		"resource":   map[string]any{"type": typ, "name": name, "patternType": "literal"},
		"operations": o,
		"host":       "*",
	}
}

// strimziACLs are exactly the operations the consumer and the operator's
// health checks need.
func strimziACLs(obj *kafkav1alpha1.IdempotentConsumer) []any {
	k := obj.Spec.Kafka
	acls := []any{
		strimziACL("topic", k.Topic, "Read", "Describe", "DescribeConfigs"),
		strimziACL("group", k.GroupID, "Read"),
	}
	if k.DeadLetterTopic != "" {
		// Write for the consumer, Read for DeadLetterReplay, the rest for
		// the health checks.
		acls = append(acls, strimziACL("topic", k.DeadLetterTopic, "Write", "Read", "Describe", "DescribeConfigs"))
	}
	return acls
}

// deadLetterKafkaTopic is the dead-letter KafkaTopic the operator keeps for
// obj's spec.kafka.deadLetterTopic under Strimzi.
func deadLetterKafkaTopic(obj *kafkav1alpha1.IdempotentConsumer) *strimziTopic {
	t := obj.Spec.Kafka.Strimzi.DeadLetterTopic
	if t == nil {
		t = &kafkav1alpha1.StrimziTopicSpec{}
	}
	partitions, replicas := int64(1), int64(3)
	if t.Partitions != nil {
		partitions = int64(*t.Partitions)
	}
	if t.Replicas != nil {
		replicas = int64(*t.Replicas)
	}
	retention := obj.Retention()
	if t.Retention != nil {
		retention = t.Retention.Duration
	}
	return &strimziTopic{name: StrimziTopicName(obj), spec: map[string]any{
		"topicName":  obj.Spec.Kafka.DeadLetterTopic,
		"partitions": partitions,
		"replicas":   replicas,
		"config":     map[string]any{"retention.ms": retention.Milliseconds()},
	}}
}

func (pc platformClient) resolveStrimzi(ctx context.Context, p platformSpec, res *platformResult, st *kafkav1alpha1.PlatformStatus, derived map[string][]byte, write bool) (*problem, error) {
	sz, ns := p.strimzi, p.owner.GetNamespace()
	auth := sz.Authentication
	if auth == "" {
		auth = kafkav1alpha1.StrimziSCRAMSHA512
	}
	userName := p.kafkaUser
	if auth != kafkav1alpha1.StrimziTLS {
		// Known before any wait: the derived Secret is complete even
		// while the Kafka or the KafkaUser is not ready.
		derived["username"] = []byte(userName)
	}
	kafka, prob, err := pc.getPlatformObject(ctx, strimziKafkaGVK, ns, sz.Cluster, kafkav1alpha1.ReasonKafkaClusterNotFound)
	if err != nil || prob != nil {
		return prob, err
	}
	listener := sz.Listener
	if listener == "" {
		listener = "tls"
	}
	var bootstrap string
	listeners, _, _ := unstructured.NestedSlice(kafka.Object, "status", "listeners")
	for _, l := range listeners {
		m, _ := l.(map[string]any)
		if n, _ := m["name"].(string); n == listener {
			bootstrap, _ = m["bootstrapServers"].(string)
		}
	}
	if bootstrap == "" {
		return &problem{kafkav1alpha1.ReasonKafkaClusterNotFound, fmt.Sprintf(
			"Kafka %q has no listener %q with bootstrapServers in its status (yet)", sz.Cluster, listener)}, nil
	}
	caName := sz.Cluster + "-cluster-ca-cert"
	ks := &kafkav1alpha1.PlatformKafkaStatus{KafkaUser: userName, CASecret: caName, BootstrapServers: bootstrap}
	st.Kafka = ks

	user := &unstructured.Unstructured{}
	user.SetGroupVersionKind(strimziUserGVK)
	user.SetName(userName)
	user.SetNamespace(ns)
	spec := map[string]any{
		"authentication": map[string]any{"type": string(auth)},
		"authorization":  map[string]any{"type": "simple", "acls": p.acls},
	}
	if write {
		cur, prob, err := pc.applyStrimziObject(ctx, p.owner, user, sz.Cluster, spec)
		if err != nil || prob != nil {
			return prob, err
		}
		user = cur
	}
	if t := p.deadLetterTopic; t != nil && write {
		topic := &unstructured.Unstructured{}
		topic.SetGroupVersionKind(strimziTopicGVK)
		topic.SetName(t.name)
		topic.SetNamespace(ns)
		if _, prob, err := pc.applyStrimziObject(ctx, p.owner, topic, sz.Cluster, t.spec); err != nil || prob != nil {
			return prob, err
		}
		ks.DeadLetterTopic = topic.GetName()
	}

	res.brokers = strings.Split(bootstrap, ",")
	res.tls = &kafkav1alpha1.KafkaTLS{CASecretRef: &kafkav1alpha1.SecretKeyRef{Name: caName, Key: "ca.crt"}}
	res.sasl = nil
	if auth == kafkav1alpha1.StrimziTLS {
		res.tls.ClientCertSecretRef = &kafkav1alpha1.SecretKeyRef{Name: userName, Key: "user.crt"}
		res.tls.ClientKeySecretRef = &kafkav1alpha1.SecretKeyRef{Name: userName, Key: "user.key"}
	} else {
		res.sasl = &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: p.derivedSecret, Key: "username"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: userName, Key: "password"}}
	}
	if !strimziReady(user) {
		return &problem{kafkav1alpha1.ReasonKafkaUserNotReady, fmt.Sprintf(
			"KafkaUser %q is not Ready yet: the Strimzi User Operator has not applied its current spec (its Secret and ACLs)", userName)}, nil
	}
	return nil, nil
}

func strimziReady(u *unstructured.Unstructured) bool {
	// Ready for the spec before the last change (ACLs for a topic just
	// added not yet applied) is not ready. Strimzi always reports the
	// generation it saw; a status without it is judged by its conditions.
	if seen, ok, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); ok && seen < u.GetGeneration() {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// applyStrimziObject creates or updates a KafkaUser or KafkaTopic this object
// controls. One of the same name that is not this object's is left alone
// unless it carries AnnotationAdoptPlatformObject naming this object.
func (pc platformClient) applyStrimziObject(ctx context.Context, obj client.Object, want *unstructured.Unstructured, cluster string, spec map[string]any) (*unstructured.Unstructured, *problem, error) {
	gvk := want.GroupVersionKind()
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(gvk)
	err := pc.reader.Get(ctx, types.NamespacedName{Namespace: want.GetNamespace(), Name: want.GetName()}, cur)
	switch {
	case meta.IsNoMatchError(err):
		return nil, &problem{kafkav1alpha1.ReasonPlatformKindAbsent, fmt.Sprintf("%s (%s) is not installed in this cluster", gvk.Kind, gvk.GroupVersion())}, nil
	case apierrors.IsNotFound(err):
		want.SetLabels(map[string]string{"strimzi.io/cluster": cluster, "app.kubernetes.io/managed-by": "idempotent-consumer-operator"})
		want.Object["spec"] = spec
		if err := controllerutil.SetControllerReference(obj, want, pc.client.Scheme()); err != nil {
			return nil, nil, err
		}
		if err := pc.client.Create(ctx, want); err != nil {
			return nil, nil, fmt.Errorf("creating %s %s: %w", gvk.Kind, want.GetName(), err)
		}
		return want, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, want.GetName(), err)
	}
	if !metav1.IsControlledBy(cur, obj) {
		if cur.GetAnnotations()[kafkav1alpha1.AnnotationAdoptPlatformObject] != obj.GetName() || metav1.GetControllerOf(cur) != nil {
			return nil, &problem{kafkav1alpha1.ReasonPlatformObjectNotOwned, fmt.Sprintf(
				"%s %q exists and is not this object's: it is left as it is. To hand it over, annotate it %s=%s",
				gvk.Kind, cur.GetName(), kafkav1alpha1.AnnotationAdoptPlatformObject, obj.GetName())}, nil
		}
		if err := controllerutil.SetControllerReference(obj, cur, pc.client.Scheme()); err != nil {
			return nil, nil, err
		}
	}
	labels := cur.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["strimzi.io/cluster"] = cluster
	cur.SetLabels(labels)
	cur.Object["spec"] = spec
	if err := pc.client.Update(ctx, cur); err != nil {
		return nil, nil, fmt.Errorf("updating %s %s: %w", gvk.Kind, cur.GetName(), err)
	}
	return cur, nil, nil
}

// applyPlatformSecret keeps the Secret of derived values, owned by obj.
// Secrets are not cached: read with the APIReader.
func (pc platformClient) applyPlatformSecret(ctx context.Context, obj client.Object, name string, data map[string][]byte) (*problem, error) {
	var cur corev1.Secret
	err := pc.reader.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, &cur)
	if apierrors.IsNotFound(err) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: name}, Data: data}
		if err := controllerutil.SetControllerReference(obj, sec, pc.client.Scheme()); err != nil {
			return nil, err
		}
		if err := pc.client.Create(ctx, sec); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", name, err)
		}
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(&cur, obj) {
		// Never adopted: it holds credentials. Another object's derived
		// Secret (an IdempotentConsumer "x-outbox" and an Outbox "x" both
		// want "x-outbox-platform") or a user's.
		owner := "no controller"
		if c := metav1.GetControllerOf(&cur); c != nil {
			owner = fmt.Sprintf("controlled by %s %q", c.Kind, c.Name)
		}
		return &problem{kafkav1alpha1.ReasonPlatformObjectNotOwned, fmt.Sprintf(
			"the Secret %q this object keeps its derived platform values in exists and is not this object's (%s): it is left as it is; rename this object or remove that Secret",
			name, owner)}, nil
	}
	// Merged: a key no longer derived stays until no pod can read it
	// (platforms_release.go takes it out).
	merged := maps.Clone(cur.Data)
	if merged == nil {
		merged = map[string][]byte{}
	}
	maps.Copy(merged, data)
	if equalData(cur.Data, merged) {
		return nil, nil
	}
	cur.Data = merged
	if err := pc.client.Update(ctx, &cur); err != nil {
		return nil, fmt.Errorf("updating Secret %s: %w", name, err)
	}
	return nil, nil
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

// The Outbox's platform integrations: the same references, resolved the
// same way, for the relay instead of the consumer. The relay's KafkaUser is
// named after its Deployment, and its derived Secret "<name>-outbox-platform",
// so that an IdempotentConsumer and an Outbox of one name never compete for
// one object. No KafkaTopic: the outbox's topics are the application's, and
// are reported missing as without Strimzi (KafkaReady, TopicNotFound).

// OutboxPlatformSecretName is the Secret the operator keeps with what it
// derives for an Outbox: "uri" (the relay's CloudNativePG URL) and
// "username" (the KafkaUser's name, for SCRAM).
func OutboxPlatformSecretName(obj *kafkav1alpha1.Outbox) string {
	return obj.Name + "-outbox-platform"
}

// OutboxKafkaUserName is the KafkaUser the operator keeps for an Outbox's
// relay (and the Secret Strimzi makes for it): the relay Deployment's name.
func OutboxKafkaUserName(obj *kafkav1alpha1.Outbox) string {
	return objects.RelayDeploymentName(obj)
}

// strimziProducerACLs are exactly the operations the relay and the
// operator's topic check need on each of topics: Write to publish, Describe
// for the metadata a producer reads, DescribeConfigs for the check of
// retention.ms and max.message.bytes (KafkaReady, ConsumerRetentionCovered),
// which uses the same credentials. The relay's kafka-go Writer is neither
// idempotent nor transactional (consumer/outbox/publish.go), so no
// IdempotentWrite on the cluster and no transactional id.
func strimziProducerACLs(topics []string) []any {
	acls := make([]any, 0, len(topics))
	for _, t := range topics {
		acls = append(acls, strimziACL("topic", t, "Write", "Describe", "DescribeConfigs"))
	}
	return acls
}

// outboxPlatform is an Outbox's platformSpec.
func outboxPlatform(obj *kafkav1alpha1.Outbox) platformSpec {
	p := platformSpec{owner: obj, podRoleWhat: "the relay role", kafkaUser: OutboxKafkaUserName(obj), derivedSecret: OutboxPlatformSecretName(obj)}
	if c := obj.Spec.Database.CloudNativePG; c != nil {
		p.cnpg, p.podRole = &c.CloudNativePGCluster, c.RelayRole
	}
	if sz := obj.Spec.Kafka.Strimzi; sz != nil {
		p.strimzi = sz
		p.acls = strimziProducerACLs(relayedTopics(obj)) // outbox_retire.go: and the retiring ones
	}
	return p
}

// resolvePlatforms fills the Outbox's spec in memory from the platform
// objects (urlSecretRef, caSecretRef, relayURLSecretRef, bootstrapServers,
// tls, sasl) and sets status.platform. A problem comes with the condition it
// belongs to (DatabaseReady for CloudNativePG, KafkaReady for Strimzi).
func (r *OutboxReconciler) resolvePlatforms(ctx context.Context, obj *kafkav1alpha1.Outbox, write bool) (string, *problem, error) {
	p := outboxPlatform(obj)
	if !p.used() {
		obj.Status.Platform = nil
		return "", nil, nil
	}
	res, err := platformClient{r.Client, r.APIReader}.resolve(ctx, p, write)
	d, k := &obj.Spec.Database, &obj.Spec.Kafka
	if res.databaseURL != nil {
		d.URLSecretRef, d.CASecretRef = *res.databaseURL, res.databaseCA
	}
	if res.podURL != nil {
		d.RelayURLSecretRef = res.podURL
	}
	if res.brokers != nil {
		k.BootstrapServers, k.TLS, k.SASL = res.brokers, res.tls, res.sasl
	}
	if err != nil {
		return "", nil, err
	}
	if res.prob == nil && res.poolMode != "" && res.poolMode != "session" {
		// The consumer is told the pool mode; the relay cannot work in
		// any but session mode (docs/outbox.md).
		res.prob = &problem{kafkav1alpha1.ReasonInvalidSpec, fmt.Sprintf(
			"Pooler %q pools in %s mode: the relay holds a session (an advisory lock, LISTEN), which only session mode keeps; name a Pooler in session mode, or none",
			obj.Spec.Database.CloudNativePG.Pooler, res.poolMode)}
	}
	if res.prob != nil {
		if res.kafkaProblem {
			return kafkav1alpha1.ConditionKafkaReady, res.prob, nil
		}
		return kafkav1alpha1.ConditionDatabaseReady, res.prob, nil
	}
	obj.Status.Platform = res.status
	return "", nil, nil
}
