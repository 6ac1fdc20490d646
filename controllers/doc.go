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

// Package controllers holds the IdempotentConsumer reconciler. One Reconcile
// (reconciler.go) runs a linear chain of phases, each in its own file: the
// database (database.go: connection, table, ownership), a shared table's
// registration (sharing.go), the partitions (partitions.go: maintenance on
// schedule), the application Secret (appsecret.go), the topic checks
// (topics.go), the consumer Deployment (tableonly.go chooses: deployment.go,
// server-side apply and rollout status, or none without spec.consumer;
// rollout.go: the bound on template changes the operator itself causes),
// autoscaling (autoscaling.go), deletion (delete.go), and status (status.go:
// computed from what this loop observed, written once if it changed).
// conditions.go holds every condition writer and Event reason, secrets.go
// every Secret read and the scrubbing of their values, dberrors.go the
// mapping of database errors to reasons, scale.go the concurrency defaults
// and what the cache keeps of each object. The objects the phases apply are
// built by the pure functions of controllers/objects; SQL lives in
// consumer/dedup, behind the TableStore interface. replay.go is a second,
// small reconciler: DeadLetterReplay objects, each run as a Job built from
// the consumer Deployment's pod spec (objects/replay.go), with the status
// read from the Job and its pod's termination message.
package controllers
