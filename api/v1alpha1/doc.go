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

// Package v1alpha1 is the kafka.idempotency.dev/v1alpha1 API: the
// IdempotentConsumer kind, which declares a Kafka consumer, the PostgreSQL
// processed_event table that deduplicates its events, and the partition
// policy the operator keeps that table on; and the DeadLetterReplay kind, a
// dry run and replay of such a consumer's dead letters (deadletterreplay_*.go).
// Validation lives in the schema
// (OpenAPI and CEL markers on the types), so no admission webhook is needed.
package v1alpha1
