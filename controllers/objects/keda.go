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

package objects

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	//DELETEME
	"maps"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/envvars"
)

// KEDA's kinds, used as unstructured objects: the operator does not depend on
// KEDA's Go module, and KEDA need not be installed.
var (
	ScaledObjectGVK          = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}
	TriggerAuthenticationGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "TriggerAuthentication"}
)

// ScaledObjectName is the name of the ScaledObject (and TriggerAuthentication)
// of an object: the Deployment's name.
func ScaledObjectName(obj *kafkav1alpha1.IdempotentConsumer) string { return DeploymentName(obj) }

// ScaledObjectBounds are the replica bounds the ScaledObject gets: maxReplicas
// capped at the topic's partition count when known, but never below
// minReplicas (KEDA refuses max < min).
func ScaledObjectBounds(obj *kafkav1alpha1.IdempotentConsumer, partitions int32) (lo, hi int32) {
	a := obj.Spec.Autoscaling
	lo, hi = a.MinReplicasOrDefault(), a.MaxReplicas
	if partitions > 0 && hi > partitions {
		hi = partitions
	}
	return lo, max(hi, lo, 1)
}

// kedaLabels are the labels of the KEDA objects: the Deployment's.
func kedaLabels(obj *kafkav1alpha1.IdempotentConsumer) map[string]any {
	l := map[string]string{
		LabelComponent: "autoscaling",
		LabelManagedBy: ManagedByValue,
		LabelPartOf:    "idempotency-operator",
	}
	maps.Copy(l, SelectorLabels(obj))
	out := map[string]any{}
	for k, v := range l {
		out[k] = v
	}
	return out
}

func ownerRef(obj *kafkav1alpha1.IdempotentConsumer) map[string]any {
	return map[string]any{
		"apiVersion":         kafkav1alpha1.GroupVersion.String(),
		"kind":               "IdempotentConsumer",
		"name":               obj.Name,
		"uid":                string(obj.UID),
		"controller":         true,
		"blockOwnerDeletion": true,
	}
}

// ScaledObject returns the KEDA ScaledObject for obj: a Kafka trigger
// on the consumer group's lag for the topic, scaling the consumer
// Deployment. partitions (0 when unknown) caps maxReplicaCount. A pure
// function of its inputs.
func ScaledObject(obj *kafkav1alpha1.IdempotentConsumer, partitions int32) *unstructured.Unstructured {
	a := obj.Spec.Autoscaling
	k := obj.Spec.Kafka
	lo, hi := ScaledObjectBounds(obj, partitions)

	md := map[string]any{
		"bootstrapServers": strings.Join(k.BootstrapServers, ","),
		"consumerGroup":    k.GroupID,
		"topic":            k.Topic,
		"lagThreshold":     strconv.FormatInt(a.LagThresholdOrDefault(), 10),
		"offsetResetPolicy": func() string {
			// A group without committed offsets starts where the consumer
			// does (earliest, unless consumer.env says otherwise), so KEDA
			// counts the same lag the consumer will work through.
			for _, e := range obj.Spec.Consumer.Env {
				if e.Name == envvars.StartOffset && e.Value == "latest" {
					return "latest"
				}
			}
			return "earliest"
		}(),
	}
	if a.ActivationLagThreshold != nil {
		md["activationLagThreshold"] = strconv.FormatInt(*a.ActivationLagThreshold, 10)
	}
	if k.TLS != nil {
		md["tls"] = "enable"
		if k.TLS.InsecureSkipVerify {
			md["unsafeSsl"] = "true"
		}
	}
	if k.SASL != nil {
		md["sasl"] = kedaSASL(k.SASL.Mechanism)
	}
	trigger := map[string]any{"type": "kafka", "metadata": md}
	if TriggerAuthentication(obj) != nil {
		trigger["authenticationRef"] = map[string]any{"name": ScaledObjectName(obj)}
	}
	spec := map[string]any{
		"scaleTargetRef": map[string]any{
			"apiVersion": "apps/v1",
			"kind":       "Deployment",
			"name":       DeploymentName(obj),
		},
		"minReplicaCount": int64(lo),
		"maxReplicaCount": int64(hi),
		"triggers":        []any{trigger},
	}
	if a.PollingInterval != nil {
		spec["pollingInterval"] = int64(*a.PollingInterval)
	}
	if a.CooldownPeriod != nil {
		spec["cooldownPeriod"] = int64(*a.CooldownPeriod)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":            ScaledObjectName(obj),
			"namespace":       obj.Namespace,
			"labels":          kedaLabels(obj),
			"ownerReferences": []any{ownerRef(obj)},
		},
		"spec": spec,
	}}
	u.SetGroupVersionKind(ScaledObjectGVK)
	// The hash covers the TriggerAuthentication too: both are applied together.
	var auth any
	if ta := TriggerAuthentication(obj); ta != nil {
		auth = ta.Object["spec"]
	}
	b, _ := json.Marshal([]any{spec, auth})
	sum := sha256.Sum256(b)
	u.SetAnnotations(map[string]string{AnnotationSpecHash: hex.EncodeToString(sum[:12])})
	return u
}

// TriggerAuthentication returns the TriggerAuthentication that hands
// KEDA the Kafka credentials (by Secret reference, as the consumer gets
// them), or nil when the brokers need none.
func TriggerAuthentication(obj *kafkav1alpha1.IdempotentConsumer) *unstructured.Unstructured {
	k := obj.Spec.Kafka
	var refs []any
	add := func(param string, ref *kafkav1alpha1.SecretKeyRef) {
		if ref != nil {
			refs = append(refs, map[string]any{"parameter": param, "name": ref.Name, "key": ref.Key})
		}
	}
	if t := k.TLS; t != nil {
		add("ca", t.CASecretRef)
		add("cert", t.ClientCertSecretRef)
		add("key", t.ClientKeySecretRef)
	}
	if s := k.SASL; s != nil {
		add("username", &s.UsernameSecretRef)
		add("password", &s.PasswordSecretRef)
	}
	if len(refs) == 0 {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":            ScaledObjectName(obj),
			"namespace":       obj.Namespace,
			"labels":          kedaLabels(obj),
			"ownerReferences": []any{ownerRef(obj)},
		},
		"spec": map[string]any{"secretTargetRef": refs},
	}}
	u.SetGroupVersionKind(TriggerAuthenticationGVK)
	return u
}

// kedaSASL is KEDA's name for a SASL mechanism.
func kedaSASL(m kafkav1alpha1.SASLMechanism) string {
	switch m {
	case kafkav1alpha1.SASLScramSHA256:
		return "scram_sha256"
	case kafkav1alpha1.SASLScramSHA512:
		return "scram_sha512"
	default:
		return "plaintext"
	}
}
