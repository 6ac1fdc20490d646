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
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/controllers/objects"
)

// ParseWatchNamespaces parses the manager's --watch-namespaces flag: a
// comma-separated list of namespace names. Empty means every namespace (a
// cluster-wide install). Duplicates are dropped; an empty entry or a name
// that is not a valid namespace name is an error, so a typo cannot quietly
// turn into a namespace nobody uses.
func ParseWatchNamespaces(flag string) ([]string, error) {
	if strings.TrimSpace(flag) == "" {
		return nil, nil
	}
	var out []string
	for i, ns := range strings.Split(flag, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			return nil, fmt.Errorf("parsing --watch-namespaces %q: entry %d is empty", flag, i+1)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("parsing --watch-namespaces %q: %q is not a namespace name: %s", flag, ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// CacheOptions are the manager's cache options. Only Deployments and Jobs
// (the DeadLetterReplay Jobs) labelled as this operator's are cached, and cached objects carry no managedFields but
// the operator's own apply entry on Deployments (stripManagedFields). With
// namespaces set, every informer the manager starts (IdempotentConsumers,
// Deployments, the metadata-only watch of Secrets) lists and watches those
// namespaces only, so a namespaced install needs no cluster-wide read of
// anything; nil or empty watches the cluster.
func CacheOptions(namespaces []string) cache.Options {
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: labels.SelectorFromSet(labels.Set{objects.LabelManagedBy: objects.ManagedByValue})},
		&batchv1.Job{}:       {Label: labels.SelectorFromSet(labels.Set{objects.LabelManagedBy: objects.ManagedByValue})},
	}, DefaultTransform: stripManagedFields}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = make(map[string]cache.Config, len(namespaces))
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// ClientOptions are the manager's client options: Secrets bypass the cache
// and are read with a GET of the one Secret a reconcile needs (in the
// object's own namespace), so the operator never holds Secret data in memory
// beyond a reconcile.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}
