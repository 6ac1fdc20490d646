package controllers

import (
	"strings"
	"testing"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// TestArgoHealthListsEveryWarning: the Argo CD snippet in docs/gitops.md names
// every warning condition False on a Healthy object, so a durability risk is
// visible in Argo CD as it is in kubectl (the snippet once knew only three).
func TestArgoHealthListsEveryWarning(t *testing.T) {
	for _, w := range []string{
		kafkav1alpha1.ConditionTopicRetentionCovered,
		kafkav1alpha1.ConditionReplicasWithinPartitions,
		kafkav1alpha1.ConditionAutoscalingReady,
		kafkav1alpha1.ConditionDatabaseDurable,
	} {
		obj := map[string]any{
			"metadata": map[string]any{"generation": int64(1)},
			"status": map[string]any{
				"observedGeneration": int64(1),
				"conditions": []any{
					map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "ready"},
					map[string]any{"type": w, "status": "False", "reason": "SomeRisk", "message": "m"},
				},
			},
		}
		status, msg := argoHealth(t, obj)
		if status != "Healthy" || !strings.Contains(msg, w+" False (SomeRisk)") {
			t.Errorf("%s False: Argo CD health %q, message %q; want Healthy naming %s", w, status, msg, w)
		}
	}
}
