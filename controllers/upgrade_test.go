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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestOperatorUpgrade upgrades the operator with consumers running.
// The previous release is a manager whose default consumer image is
// v0.9.0 (a release's builder differs from the next in exactly this way at
// least), and its Deployments are then stripped of the annotations this
// release adds, so they are as a release before the rollout gate made
// them. The new manager (image v1.0.0, --max-concurrent-template-upgrades=2)
// must change no more than 2 consumer Deployments at a time, the next ones
// only once a rollout completes; a spec change is applied at once whatever
// the bound; and the tables (markers, partitions) stay exactly as they were.
// Then a downgrade: a table of a newer layout version is refused, untouched.
func TestOperatorUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	const (
		n        = 7
		bound    = 2
		oldImage = "registry.example/consumer:v0.9.0"
		newImage = "registry.example/consumer:v1.0.0"
	)
	ctx := context.Background()
	te := startEnv(t, envOptions{options: Options{ConsumerImage: oldImage}})
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	var names []string
	for i := range n {
		name := fmt.Sprintf("c%d", i)
		names = append(names, name)
		te.create(t, newConsumer(ns, name, withTable("events_"+name)))
	}
	// pinned names its image: the new release builds the same Deployment
	// for it, which must not change at all (nor take a slot).
	const pinned = "pinned"
	te.create(t, newConsumer(ns, pinned, withTable("events_pinned"), func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Consumer.Image = "registry.example/consumer:pinned"
	}))
	for _, name := range append(slices.Clone(names), pinned) {
		te.waitReady(t, ns, name)
	}
	te.stopManager()

	// The previous release's Deployments: no template hash, no upgrade mark.
	for _, name := range append(slices.Clone(names), pinned) {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-consumer"}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, AnnotationTemplateHash, AnnotationTemplateUpgrade)
		if err := te.c.Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
		// A Deployment's annotations are part of its generation; the
		// Deployment controller observes the new one at once.
		completeRollout(t, te, ns, dep.Name)
	}
	conn := pgConn(t, dbURL)
	catalogBefore := catalogOf(t, conn)
	deps := func() map[string]*appsv1.Deployment {
		var list appsv1.DeploymentList
		if err := te.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		out := map[string]*appsv1.Deployment{}
		for i := range list.Items {
			d := &list.Items[i]
			out[strings.TrimSuffix(d.Name, "-consumer")] = d
		}
		return out
	}
	pinnedVersion := deps()[pinned].ResourceVersion
	for name, d := range deps() {
		if name == pinned {
			continue
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != oldImage || !rolledOut(d) {
			t.Fatalf("previous release: Deployment of %s runs %s (rolled out %t), want %s, rolled out", name, img, rolledOut(d), oldImage)
		}
	}

	// The new release. Nothing completes a rollout until the test does.
	te.deploymentsAvailable.Store(false)
	te.startManager(t, te.cfg.Config, envOptions{options: Options{ConsumerImage: newImage, MaxConcurrentTemplateUpgrades: fmt.Sprint(bound)}})

	specChange := "" // a waiting object whose spec then changes
	// upgraded lists the objects whose Deployment has the new image, and
	// checks the bound: at most `bound` of them (besides the spec change)
	// still rolling out.
	upgraded := func() (done, rolling []string) {
		for name, d := range deps() {
			if d.Spec.Template.Spec.Containers[0].Image != newImage {
				continue
			}
			done = append(done, name)
			if !rolledOut(d) && name != specChange {
				rolling = append(rolling, name)
			}
		}
		slices.Sort(done)
		slices.Sort(rolling)
		if len(rolling) > bound {
			t.Fatalf("%d Deployments roll out the new template at once (%v), bound %d", len(rolling), rolling, bound)
		}
		return done, rolling
	}
	var wave []string
	eventually(t, 30*time.Second, fmt.Sprintf("%d Deployments with the new template", bound), func() (bool, string) {
		done, rolling := upgraded()
		wave = rolling
		return len(rolling) == bound, fmt.Sprint(done)
	})
	// Hold: with both slots taken, no other Deployment changes, the
	// waiting objects say why, and the metric counts them.
	waiting := slices.DeleteFunc(slices.Clone(names), func(s string) bool { return slices.Contains(wave, s) })
	eventually(t, 30*time.Second, "the others waiting with TemplateUpgradePending", func() (bool, string) {
		for _, name := range waiting {
			c := meta.FindStatusCondition(te.get(t, ns, name).Status.Conditions, ConditionTemplateUpgradePending)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonWaitingForRolloutSlot ||
				!strings.Contains(c.Message, fmt.Sprintf("%d of %d in use", bound, bound)) {
				return false, fmt.Sprintf("%s: %v", name, c)
			}
		}
		return testutil.ToFloat64(templateUpgradesPending) == float64(len(waiting)),
			fmt.Sprintf("%s = %v", MetricTemplateUpgradesPending, testutil.ToFloat64(templateUpgradesPending))
	})
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if done, _ := upgraded(); len(done) != bound {
			t.Fatalf("while both slots are taken, %v have the new template, want only %v", done, wave)
		}
	}
	for _, name := range waiting {
		if obj := te.get(t, ns, name); !obj.IsReady() {
			t.Fatalf("%s is not Ready while its template upgrade waits: %s", name, conditionsSummary(obj))
		}
	}

	// A spec change is applied at once, slots or not.
	specChange = waiting[len(waiting)-1]
	if err := te.update(t, ns, specChange, func(o *kafkav1alpha1.IdempotentConsumer) {
		o.Spec.Consumer.Env = append(o.Spec.Consumer.Env, corev1.EnvVar{Name: "LOG_LEVEL", Value: "debug"})
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the spec change applied at once", func() (bool, string) {
		d := deps()[specChange]
		c := d.Spec.Template.Spec.Containers[0]
		return c.Image == newImage && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "LOG_LEVEL" }), c.Image
	})
	if c := meta.FindStatusCondition(te.get(t, ns, specChange).Status.Conditions, ConditionTemplateUpgradePending); c != nil {
		eventually(t, 10*time.Second, "TemplateUpgradePending gone after the spec change", func() (bool, string) {
			c := meta.FindStatusCondition(te.get(t, ns, specChange).Status.Conditions, ConditionTemplateUpgradePending)
			return c == nil, fmt.Sprint(c)
		})
	}

	// Wave after wave: completing the rollouts in progress frees their
	// slots, and the next ones (never more than the bound) start.
	for {
		for _, name := range wave {
			completeRollout(t, te, ns, name+"-consumer")
		}
		done, _ := upgraded()
		if len(done) == n {
			break
		}
		remaining := n - len(done)
		want := min(bound, remaining)
		eventually(t, 30*time.Second, fmt.Sprintf("the next %d template upgrades", want), func() (bool, string) {
			d, rolling := upgraded()
			wave = rolling
			return len(rolling) == want, fmt.Sprintf("upgraded %v, rolling %v", d, rolling)
		})
		t.Logf("wave: %v", wave)
	}
	for _, name := range names {
		eventually(t, 30*time.Second, name+" without TemplateUpgradePending", func() (bool, string) {
			c := meta.FindStatusCondition(te.get(t, ns, name).Status.Conditions, ConditionTemplateUpgradePending)
			return c == nil, fmt.Sprint(c)
		})
		if name != specChange && !te.hasEvents(t, ns, name, ReasonTemplateUpgraded) {
			t.Errorf("%s: no %s Event", name, ReasonTemplateUpgraded)
		}
	}
	if c := meta.FindStatusCondition(te.get(t, ns, pinned).Status.Conditions, ConditionTemplateUpgradePending); c != nil || hasEvent(te.events(t, ns, pinned), ReasonTemplateUpgraded) {
		t.Errorf("%s, whose Deployment the new release builds the same, waited or was upgraded: %v", pinned, c)
	}
	if d := deps()[pinned]; d.ResourceVersion != pinnedVersion {
		t.Errorf("the Deployment the new release builds the same was written: resourceVersion %s, was %s; annotations %v",
			d.ResourceVersion, pinnedVersion, d.Annotations)
	}
	if v := testutil.ToFloat64(templateUpgradesPending); v != 0 {
		t.Errorf("%s = %v after the upgrade, want 0", MetricTemplateUpgradesPending, v)
	}
	if after := catalogOf(t, conn); after != catalogBefore {
		t.Fatalf("the upgrade changed the tables:\n%s\nbefore:\n%s", after, catalogBefore)
	}

	// A downgrade: a newer release laid c0's table out as version
	// LayoutVersion()+1. This release refuses it, with a reason that says
	// so, and touches nothing (the marker keeps the newer version).
	newer := dedup.LayoutVersion() + 1
	var comment string
	if err := conn.QueryRow(ctx, `SELECT obj_description('public.events_c0'::regclass, 'pg_class')`).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	comment = strings.Replace(comment, fmt.Sprintf(`"version":%d`, dedup.LayoutVersion()), fmt.Sprintf(`"version":%d`, newer), 1)
	if _, err := conn.Exec(ctx, `COMMENT ON TABLE public.events_c0 IS '`+comment+`'`); err != nil {
		t.Fatal(err)
	}
	catalogNewer := catalogOf(t, conn)
	te.poke(t, ns, "c0")
	got := te.waitCondition(t, ns, "c0", kafkav1alpha1.ConditionDatabaseReady, metav1.ConditionFalse, ReasonTableLayoutNewer)
	if c := got.GetCondition(kafkav1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue ||
		!strings.Contains(got.GetCondition(kafkav1alpha1.ConditionDatabaseReady).Message, fmt.Sprintf("layout version %d", newer)) {
		t.Fatalf("a table of a newer layout: want Stalled and a message naming version %d: %s", newer, conditionsSummary(got))
	}
	if after := catalogOf(t, conn); after != catalogNewer {
		t.Fatalf("the downgraded operator changed the tables:\n%s\nbefore:\n%s", after, catalogNewer)
	}
}

// completeRollout does what the Deployment controller does when a rollout
// is over: the status reports the current generation on every replica.
func completeRollout(t *testing.T, te *testEnv, ns, name string) {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := te.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, dep); err != nil {
		t.Fatal(err)
	}
	r := ptr.Deref(dep.Spec.Replicas, 1)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
			LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if err := te.c.Status().Update(context.Background(), dep); err != nil {
		t.Fatalf("completing the rollout of %s: %v", name, err)
	}
}

// catalogOf lists every table of the database outside the system schemas
// with its kind, partition bound and comment (the ownership markers).
func catalogOf(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
SELECT n.nspname || '.' || c.relname, c.relkind::text, coalesce(pg_get_expr(c.relpartbound, c.oid), ''),
       coalesce(obj_description(c.oid, 'pg_class'), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%' AND c.relkind IN ('r', 'p')
 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name, kind, bound, comment string
		if err := rows.Scan(&name, &kind, &bound, &comment); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %q %s\n", name, kind, bound, comment)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if b.Len() == 0 {
		t.Fatal("no tables in the database")
	}
	return b.String()
}
