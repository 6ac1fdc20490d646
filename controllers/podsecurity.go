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
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/idempotency-dev/operator/controllers/objects"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=create

// checkPodSecurity asks the API server, with a server-side dry run, whether
// it would admit a pod built from the Deployment's template in the object's
// namespace. Pod Security admission judges pods only (for Deployments it
// only warns), so without this check a template that breaks the enforced
// profile is applied and fails silently, in the ReplicaSet's FailedCreate
// events. A refusal by Pod Security is returned as a problem; a dry run
// refused for any other reason (the operator lacks the pods/create right,
// a webhook without dry-run support) leaves the judgement to the rollout,
// and only a failure of the API server itself is returned as an error.
func (r *IdempotentConsumerReconciler) checkPodSecurity(ctx context.Context, dep *appsv1.Deployment) (*problem, error) {
	return dryRunPod(ctx, r.Client, dep, "consumer")
}

// dryRunPod is checkPodSecurity for any Deployment the operator builds;
// what names its pods in the message ("consumer", "outbox relay").
func dryRunPod(ctx context.Context, c client.Client, dep *appsv1.Deployment, what string) (*problem, error) {
	pod := objects.PodFromTemplate(dep)
	err := c.Create(ctx, pod, client.DryRunAll, client.FieldOwner(FieldOwner))
	switch {
	case err == nil:
		return nil, nil
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity"):
		return &problem{ReasonPodSecurityRejected, fmt.Sprintf(
			"The API server refuses the %s pods of Deployment %s, so the Deployment is not applied: %s", what, dep.Name, podSecurityMessage(err))}, nil
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsAlreadyExists(err):
		log.FromContext(ctx).Info("Dry run of a pod refused, not by Pod Security; applying the Deployment anyway",
			"deployment", klog.KObj(dep), "error", err.Error())
		return nil, nil
	default:
		return nil, fmt.Errorf("dry-running a pod of Deployment %s: %w", dep.Name, err)
	}
}

// podSecurityMessage is the API server's reason without the generated pod
// name, which differs on every try and would change the condition each time.
func podSecurityMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "violates PodSecurity"); i >= 0 {
		return msg[i:]
	}
	return msg
}
