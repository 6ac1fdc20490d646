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
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodFromTemplate is the pod the ReplicaSet controller would create from the
// Deployment's template, as far as admission can tell: its labels,
// annotations and spec, in the Deployment's namespace.
func PodFromTemplate(dep *appsv1.Deployment) *corev1.Pod {
	t := dep.Spec.Template.DeepCopy()
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: dep.Name + "-",
			Namespace:    dep.Namespace,
			Labels:       t.Labels,
			Annotations:  t.Annotations,
		},
		Spec: t.Spec,
	}
}
