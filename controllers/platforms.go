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
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// Platform integrations (docs/platforms.md). Before the phases run, the
// CloudNativePG and Strimzi references are resolved into the refs the rest
// of the reconciler already understands (urlSecretRef, caSecretRef,
// consumerURLSecretRef, bootstrapServers, tls, sasl), in memory only: the
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

// usesPlatforms reports whether obj names CloudNativePG or Strimzi.
func usesPlatforms(obj *kafkav1alpha1.IdempotentConsumer) bool {
	return obj.Spec.Database.CloudNativePG != nil || obj.Spec.Kafka.Strimzi != nil
}

// platformSecretNames are the Secrets the platform integrations read, known
// from the spec alone (for the Secret watch's index): a change to one, or
// its creation, reconciles the object at once.
func platformSecretNames(obj *kafkav1alpha1.IdempotentConsumer) []string {
	var names []string
	if c := obj.Spec.Database.CloudNativePG; c != nil {
		names = append(names, c.Cluster+"-app", c.Cluster+"-ca")
		if c.ConsumerRole != nil {
			names = append(names, c.ConsumerRole.SecretRef.Name)
		}
	}
	if sz := obj.Spec.Kafka.Strimzi; sz != nil {
		names = append(names, obj.Name, sz.Cluster+"-cluster-ca-cert", PlatformSecretName(obj))
	}
	return names
}

// resolvePlatforms fills obj's spec in memory from the platform objects and
// sets status.platform. A problem says why it could not (yet).
func (r *IdempotentConsumerReconciler) resolvePlatforms(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, write bool) (*problem, error) {
	if !usesPlatforms(obj) {
		obj.Status.Platform = nil
		return nil, nil
	}
	st := &kafkav1alpha1.PlatformStatus{}
	derived := map[string][]byte{}
	if obj.Spec.Database.CloudNativePG != nil {
		prob, err := r.resolveCNPG(ctx, obj, st, derived)
		if err != nil || prob != nil {
			return prob, err
		}
	}
	if obj.Spec.Kafka.Strimzi != nil {
		prob, err := r.resolveStrimzi(ctx, obj, st, derived, write)
		if err != nil || prob != nil {
			return prob, err
		}
	}
	if write && len(derived) > 0 {
		if err := r.applyPlatformSecret(ctx, obj, derived); err != nil {
			return nil, err
		}
	}
	obj.Status.Platform = st
	return nil, nil
}

// getPlatformObject reads another operator's object; a kind that is not
// installed and an object that does not exist are problems.
func (r *IdempotentConsumerReconciler) getPlatformObject(ctx context.Context, gvk schema.GroupVersionKind, namespace, name, notFoundReason string) (*unstructured.Unstructured, *problem, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u)
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

func (r *IdempotentConsumerReconciler) resolveCNPG(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, st *kafkav1alpha1.PlatformStatus, derived map[string][]byte) (*problem, error) {
	c := obj.Spec.Database.CloudNativePG
	appName, caName := c.Cluster+"-app", c.Cluster+"-ca"
	// Set first: deletion reads them even when the Cluster is gone.
	obj.Spec.Database.URLSecretRef = kafkav1alpha1.SecretKeyRef{Name: appName, Key: "uri"}
	obj.Spec.Database.CASecretRef = &kafkav1alpha1.SecretKeyRef{Name: caName, Key: "ca.crt"}
	cluster, prob, err := r.getPlatformObject(ctx, cnpgClusterGVK, obj.Namespace, c.Cluster, kafkav1alpha1.ReasonCNPGClusterNotFound)
	if err != nil || prob != nil {
		return prob, err
	}
	writeService, _, _ := unstructured.NestedString(cluster.Object, "status", "writeService")
	if writeService == "" {
		writeService = c.Cluster + "-rw"
	}
	app, prob, err := r.readCNPGSecret(ctx, obj.Namespace, appName, "the Cluster's application owner Secret")
	if err != nil || prob != nil {
		return prob, err
	}
	if _, prob, err := r.readCNPGSecret(ctx, obj.Namespace, caName, "the Cluster's CA Secret"); err != nil || prob != nil {
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

	if c.ConsumerRole == nil && c.Pooler == "" {
		return nil, nil
	}
	consumerHost := ddlHost
	if c.Pooler != "" {
		pooler, prob, err := r.getPlatformObject(ctx, cnpgPoolerGVK, obj.Namespace, c.Pooler, kafkav1alpha1.ReasonCNPGClusterNotFound)
		if err != nil || prob != nil {
			return prob, err
		}
		if name, _, _ := unstructured.NestedString(pooler.Object, "spec", "cluster", "name"); name != c.Cluster {
			return &problem{kafkav1alpha1.ReasonCNPGClusterNotFound, fmt.Sprintf("Pooler %q is for Cluster %q, not %q", c.Pooler, name, c.Cluster)}, nil
		}
		consumerHost = c.Pooler // the Pooler's Service is named after it
		port = "5432"
		// CloudNativePG's default pool mode is session: a server to the
		// consumer. In transaction mode the runtime must be told
		// (docs/database-secrets.md); a value the user set wins.
		mode, _, _ := unstructured.NestedString(pooler.Object, "spec", "pgbouncer", "poolMode")
		if mode == "" {
			mode = "session"
		}
		ds.ConsumerPoolMode = mode
		if mode == "transaction" && !hasEnv(obj.Spec.Consumer.Env, envvars.DatabasePooler) {
			obj.Spec.Consumer.Env = append(obj.Spec.Consumer.Env, corev1.EnvVar{Name: envvars.DatabasePooler, Value: "transaction"})
		}
	}
	user, password := string(app.Data["username"]), string(app.Data["password"])
	if user == "" {
		user = string(app.Data["user"])
	}
	ds.ConsumerSecret = appName
	if role := c.ConsumerRole; role != nil {
		sec, prob, err := r.readCNPGSecret(ctx, obj.Namespace, role.SecretRef.Name, "the consumer role's Secret")
		if err != nil || prob != nil {
			return prob, err
		}
		user, password = role.Name, string(sec.Data["password"])
		ds.ConsumerSecret = role.SecretRef.Name
	}
	u := url.URL{Scheme: "postgresql", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(consumerHost, port), Path: "/" + string(app.Data["dbname"])}
	derived["uri"] = []byte(u.String())
	obj.Spec.Database.ConsumerURLSecretRef = &kafkav1alpha1.SecretKeyRef{Name: PlatformSecretName(obj), Key: "uri"}
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

func (r *IdempotentConsumerReconciler) readCNPGSecret(ctx context.Context, namespace, name, what string) (*corev1.Secret, *problem, error) {
	var sec corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &problem{kafkav1alpha1.ReasonCNPGSecretNotFound, fmt.Sprintf(
				"Secret %q (%s) not found in namespace %q: CloudNativePG creates it with the Cluster", name, what, namespace)}, nil
		}
		return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	return &sec, nil, nil
}

// strimziACLs are exactly the operations the consumer and the operator's
// health checks need.
func strimziACLs(obj *kafkav1alpha1.IdempotentConsumer) []any {
	acl := func(typ, name string, ops ...string) any {
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
	k := obj.Spec.Kafka
	acls := []any{
		acl("topic", k.Topic, "Read", "Describe", "DescribeConfigs"),
		acl("group", k.GroupID, "Read"),
	}
	if k.DeadLetterTopic != "" {
		// Write for the consumer, Read for DeadLetterReplay, the rest for
		// the health checks.
		acls = append(acls, acl("topic", k.DeadLetterTopic, "Write", "Read", "Describe", "DescribeConfigs"))
	}
	return acls
}

func (r *IdempotentConsumerReconciler) resolveStrimzi(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, st *kafkav1alpha1.PlatformStatus, derived map[string][]byte, write bool) (*problem, error) {
	sz := obj.Spec.Kafka.Strimzi
	kafka, prob, err := r.getPlatformObject(ctx, strimziKafkaGVK, obj.Namespace, sz.Cluster, kafkav1alpha1.ReasonKafkaClusterNotFound)
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
	auth := sz.Authentication
	if auth == "" {
		auth = kafkav1alpha1.StrimziSCRAMSHA512
	}
	userName := obj.Name
	caName := sz.Cluster + "-cluster-ca-cert"
	ks := &kafkav1alpha1.PlatformKafkaStatus{KafkaUser: userName, CASecret: caName, BootstrapServers: bootstrap}
	st.Kafka = ks

	user := &unstructured.Unstructured{}
	user.SetGroupVersionKind(strimziUserGVK)
	user.SetName(userName)
	user.SetNamespace(obj.Namespace)
	spec := map[string]any{
		"authentication": map[string]any{"type": string(auth)},
		"authorization":  map[string]any{"type": "simple", "acls": strimziACLs(obj)},
	}
	if write {
		cur, prob, err := r.applyStrimziObject(ctx, obj, user, sz.Cluster, spec)
		if err != nil || prob != nil {
			return prob, err
		}
		user = cur
	}
	if k := obj.Spec.Kafka; k.DeadLetterTopic != "" && write {
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
		topic := &unstructured.Unstructured{}
		topic.SetGroupVersionKind(strimziTopicGVK)
		topic.SetName(StrimziTopicName(obj))
		topic.SetNamespace(obj.Namespace)
		tspec := map[string]any{
			"topicName":  k.DeadLetterTopic,
			"partitions": partitions,
			"replicas":   replicas,
			"config":     map[string]any{"retention.ms": retention.Milliseconds()},
		}
		if _, prob, err := r.applyStrimziObject(ctx, obj, topic, sz.Cluster, tspec); err != nil || prob != nil {
			return prob, err
		}
		ks.DeadLetterTopic = topic.GetName()
	}

	k := &obj.Spec.Kafka
	k.BootstrapServers = strings.Split(bootstrap, ",")
	k.TLS = &kafkav1alpha1.KafkaTLS{CASecretRef: &kafkav1alpha1.SecretKeyRef{Name: caName, Key: "ca.crt"}}
	k.SASL = nil
	if auth == kafkav1alpha1.StrimziTLS {
		k.TLS.ClientCertSecretRef = &kafkav1alpha1.SecretKeyRef{Name: userName, Key: "user.crt"}
		k.TLS.ClientKeySecretRef = &kafkav1alpha1.SecretKeyRef{Name: userName, Key: "user.key"}
	} else {
		derived["username"] = []byte(userName)
		k.SASL = &kafkav1alpha1.KafkaSASL{Mechanism: kafkav1alpha1.SASLScramSHA512,
			UsernameSecretRef: kafkav1alpha1.SecretKeyRef{Name: PlatformSecretName(obj), Key: "username"},
			PasswordSecretRef: kafkav1alpha1.SecretKeyRef{Name: userName, Key: "password"}}
	}
	if !strimziReady(user) {
		return &problem{kafkav1alpha1.ReasonKafkaUserNotReady, fmt.Sprintf(
			"KafkaUser %q is not Ready yet: the Strimzi User Operator has not created its Secret and ACLs", userName)}, nil
	}
	return nil, nil
}

func strimziReady(u *unstructured.Unstructured) bool {
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
func (r *IdempotentConsumerReconciler) applyStrimziObject(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, want *unstructured.Unstructured, cluster string, spec map[string]any) (*unstructured.Unstructured, *problem, error) {
	gvk := want.GroupVersionKind()
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(gvk)
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: want.GetNamespace(), Name: want.GetName()}, cur)
	switch {
	case meta.IsNoMatchError(err):
		return nil, &problem{kafkav1alpha1.ReasonPlatformKindAbsent, fmt.Sprintf("%s (%s) is not installed in this cluster", gvk.Kind, gvk.GroupVersion())}, nil
	case apierrors.IsNotFound(err):
		want.SetLabels(map[string]string{"strimzi.io/cluster": cluster, "app.kubernetes.io/managed-by": "idempotent-consumer-operator"})
		want.Object["spec"] = spec
		if err := controllerutil.SetControllerReference(obj, want, r.Client.Scheme()); err != nil {
			return nil, nil, err
		}
		if err := r.Client.Create(ctx, want); err != nil {
			return nil, nil, fmt.Errorf("creating %s %s: %w", gvk.Kind, want.GetName(), err)
		}
		return want, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, want.GetName(), err)
	}
	if !metav1.IsControlledBy(cur, obj) {
		if cur.GetAnnotations()[kafkav1alpha1.AnnotationAdoptPlatformObject] != obj.Name || metav1.GetControllerOf(cur) != nil {
			return nil, &problem{kafkav1alpha1.ReasonPlatformObjectNotOwned, fmt.Sprintf(
				"%s %q exists and is not this object's: it is left as it is. To hand it over, annotate it %s=%s",
				gvk.Kind, cur.GetName(), kafkav1alpha1.AnnotationAdoptPlatformObject, obj.Name)}, nil
		}
		if err := controllerutil.SetControllerReference(obj, cur, r.Client.Scheme()); err != nil {
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
	if err := r.Client.Update(ctx, cur); err != nil {
		return nil, nil, fmt.Errorf("updating %s %s: %w", gvk.Kind, cur.GetName(), err)
	}
	return cur, nil, nil
}

// applyPlatformSecret keeps the Secret of derived values, owned by obj.
// Secrets are not cached: read with the APIReader.
func (r *IdempotentConsumerReconciler) applyPlatformSecret(ctx context.Context, obj *kafkav1alpha1.IdempotentConsumer, data map[string][]byte) error {
	name := PlatformSecretName(obj)
	var cur corev1.Secret
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, &cur)
	if apierrors.IsNotFound(err) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: name}, Data: data}
		if err := controllerutil.SetControllerReference(obj, sec, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, sec); err != nil {
			return fmt.Errorf("creating Secret %s: %w", name, err)
		}
		return nil
	} else if err != nil {
		return fmt.Errorf("reading Secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(&cur, obj) {
		return fmt.Errorf("secret %s exists and is not this object's", name)
	}
	if equalData(cur.Data, data) {
		return nil
	}
	cur.Data = data
	if err := r.Client.Update(ctx, &cur); err != nil {
		return fmt.Errorf("updating Secret %s: %w", name, err)
	}
	return nil
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
