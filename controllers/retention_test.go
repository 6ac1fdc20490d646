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
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
)

// warnings collects the warnings the API server sends, as kubectl prints
// them.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// warningClient is a client of the test's API server that keeps the
// warnings it is sent.
func (te *testEnv) warningClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(te.cfg.Config)
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// setRetention writes spec.dedup.retention with c (retrying on conflicts
// with the operator's writes) and returns the warnings the write got.
func (te *testEnv) setRetention(t *testing.T, c client.Client, w *warnings, ns, name string, d time.Duration, opts ...client.UpdateOption) []string {
	t.Helper()
	for range 10 {
		obj := te.get(t, ns, name)
		obj.Spec.Dedup.Retention = &metav1.Duration{Duration: d}
		w.take()
		err := c.Update(context.Background(), obj, opts...)
		if err == nil {
			return w.take()
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatal(err)
		}
	}
	t.Fatalf("update of %s/%s kept conflicting", ns, name)
	return nil
}

// partitionEnd is the upper bound of a Daily partition of processed_event.
func partitionEnd(t *testing.T, name string) time.Time {
	t.Helper()
	from, ok := dedup.ParsePartitionName("processed_event", dedup.Daily, name)
	if !ok {
		t.Fatalf("partition name %q does not parse", name)
	}
	return dedup.Daily.Next(from)
}

// TestRetentionDecrease: lowering spec.dedup.retention is warned about by
// the API server, shown in status, and takes effect only after
// spec.dedup.retentionDecreaseGrace; raising it back within the grace keeps
// every partition.
func TestRetentionDecrease(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest and PostgreSQL: skipped with -short")
	}
	te := startEnv(t, envOptions{})
	t.Run("TakenBackWithinGrace", func(t *testing.T) { testRetentionDecreaseTakenBack(t, te) })
	t.Run("DroppedAfterGrace", func(t *testing.T) { testRetentionDecreaseDropped(t, te) })
}

// lowerRetention creates a Ready object with retention 240h, lowers it to
// 24h as a typo would, and checks the API server's warning, the status
// entry and the Warning Event. It returns the partitions before and the
// pending decrease.
func lowerRetention(t *testing.T, te *testEnv, ns, dbURL string) ([]string, *kafkav1alpha1.RetentionDecrease) {
	t.Helper()
	te.secret(t, ns, "db", map[string]string{"url": dbURL})
	obj := newConsumer(ns, "orders", withRetention(240*time.Hour), withPremake(2))
	te.create(t, obj)
	te.waitReady(t, ns, obj.Name)
	conn := pgConn(t, dbURL)
	before := partitions(t, conn, "public", "processed_event")
	if len(before) < 12 {
		t.Fatalf("retention 240h of Daily partitions: %d partitions, want at least 12: %v", len(before), before)
	}

	// The policy takes effect a moment after it is created: wait for its
	// warning on a dry run.
	wc, w := te.warningClient(t)
	eventually(t, 30*time.Second, "the retention-decrease policy to warn on a dry run", func() (bool, string) {
		got := te.setRetention(t, wc, w, ns, obj.Name, 24*time.Hour, client.DryRunAll)
		return len(got) > 0, fmt.Sprint(got)
	})

	got := te.setRetention(t, wc, w, ns, obj.Name, 24*time.Hour)
	if len(got) != 1 || !strings.Contains(got[0], "lowered from 240h0m0s to 24h0m0s") || !strings.Contains(got[0], "set it back to 240h0m0s within 1h") {
		t.Errorf("warnings from the API server on lowering the retention: %q; want one that says from what to what and how to take it back", got)
	}
	// An increase gets no warning.
	if got := te.setRetention(t, wc, w, ns, obj.Name, 480*time.Hour, client.DryRunAll); len(got) != 0 {
		t.Errorf("warnings on raising the retention: %q, want none", got)
	}

	now := te.clock.Now()
	var pd *kafkav1alpha1.RetentionDecrease
	eventually(t, 30*time.Second, "status.retention.pendingDecrease", func() (bool, string) {
		st := te.get(t, ns, obj.Name).Status.Retention
		if st == nil {
			return false, "no status.retention"
		}
		pd = st.PendingDecrease
		return st.Applied == "240h0m0s" && pd != nil && pd.Retention == "24h0m0s", fmt.Sprintf("%+v", st)
	})
	if !pd.DropTime.Time.Equal(pd.DetectedTime.Add(time.Hour)) || pd.DetectedTime.Time.Before(now.Add(-time.Second)) {
		t.Errorf("pendingDecrease detected %s drops %s; want detected about %s and dropped 1h later", pd.DetectedTime, pd.DropTime, now)
	}
	// What the decrease will drop: the partitions that end 24h before the
	// drop time or earlier, and that 240h keeps.
	var want []string
	for _, p := range before {
		if end := partitionEnd(t, p); !end.After(pd.DropTime.Add(-24*time.Hour)) && end.After(pd.DropTime.Add(-240*time.Hour)) {
			want = append(want, p)
		}
	}
	if int(pd.PartitionCount) != len(want) || len(want) < 8 || len(pd.Partitions) == 0 || pd.Partitions[0] != want[0] {
		t.Errorf("pendingDecrease names %d partitions (%v), want %d starting with %v", pd.PartitionCount, pd.Partitions, len(want), want)
	}
	if last := partitionEnd(t, want[len(want)-1]); pd.ForgetBefore == nil || !pd.ForgetBefore.Time.Equal(last) {
		t.Errorf("pendingDecrease.forgetBefore %v, want %s", pd.ForgetBefore, last)
	}
	if !strings.Contains(pd.Message, "240h0m0s") || !strings.Contains(pd.Message, pd.DropTime.UTC().Format(time.RFC3339)) {
		t.Errorf("pendingDecrease.message %q: want the retention to go back to and the drop time", pd.Message)
	}
	var warned bool
	for _, e := range te.events(t, ns, obj.Name) {
		warned = warned || e.Reason == ReasonRetentionDecreasePending && e.Type == "Warning" && strings.Contains(e.Note, pd.DropTime.UTC().Format(time.RFC3339))
	}
	if !warned {
		t.Errorf("no Warning Event %s naming the drop time", ReasonRetentionDecreasePending)
	}
	if after := partitions(t, conn, "public", "processed_event"); !slices.Equal(after, before) {
		t.Fatalf("lowering the retention changed the partitions at once: %v, were %v", after, before)
	}
	return before, pd
}

func testRetentionDecreaseTakenBack(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	before, pd := lowerRetention(t, te, ns, dbURL)
	conn := pgConn(t, dbURL)

	// Half the grace later, maintenance still keeps every partition.
	te.clock.SetTime(te.clock.Now().Add(30 * time.Minute))
	te.poke(t, ns, "orders")
	time.Sleep(time.Second)
	te.waitReady(t, ns, "orders")
	if after := partitions(t, conn, "public", "processed_event"); !slices.Equal(after, before) {
		t.Fatalf("within the grace the partitions changed: %v, were %v", after, before)
	}

	// Raised back within the grace: the decrease is gone from status.
	if err := te.update(t, ns, "orders", withRetention(240*time.Hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the pending decrease to be taken back", func() (bool, string) {
		st := te.get(t, ns, "orders").Status.Retention
		return st != nil && st.PendingDecrease == nil && st.Applied == "240h0m0s", fmt.Sprintf("%+v", st)
	})
	if !te.hasEvents(t, ns, "orders", ReasonRetentionDecreaseCancelled) {
		t.Errorf("no %s Event", ReasonRetentionDecreaseCancelled)
	}

	// Past the drop time the decrease would have had: every partition is
	// still there.
	te.clock.SetTime(pd.DropTime.Add(time.Minute))
	te.poke(t, ns, "orders")
	time.Sleep(time.Second)
	te.waitReady(t, ns, "orders")
	if after := partitions(t, conn, "public", "processed_event"); !slices.Equal(after, before) {
		t.Fatalf("after raising the retention back within the grace, partitions are %v, were %v", after, before)
	}
}

func testRetentionDecreaseDropped(t *testing.T, te *testEnv) {
	ns := te.namespace(t)
	dbURL := consumertest.DatabaseURL(t)
	before, pd := lowerRetention(t, te, ns, dbURL)
	conn := pgConn(t, dbURL)

	// The grace passes: the partitions expired under 24h are dropped, the
	// others stay.
	te.clock.SetTime(pd.DropTime.Add(time.Minute))
	now := te.clock.Now()
	te.poke(t, ns, "orders")
	var kept, gone []string
	for _, p := range before {
		if partitionEnd(t, p).After(now.Add(-24 * time.Hour)) {
			kept = append(kept, p)
		} else {
			gone = append(gone, p)
		}
	}
	if len(gone) < 8 {
		t.Fatalf("only %d partitions expire under 24h: %v", len(gone), gone)
	}
	eventually(t, 30*time.Second, "the partitions expired under 24h to be dropped, the others kept: "+strings.Join(kept, ","), func() (bool, string) {
		after := partitions(t, conn, "public", "processed_event")
		return slices.Equal(after, kept), strings.Join(after, ",")
	})
	eventually(t, 30*time.Second, "status.retention applied 24h", func() (bool, string) {
		st := te.get(t, ns, "orders").Status.Retention
		return st != nil && st.PendingDecrease == nil && st.Applied == "24h0m0s", fmt.Sprintf("%+v", st)
	})
	if !te.hasEvents(t, ns, "orders", ReasonPartitionsDropped, ReasonRetentionDecreaseApplied) {
		t.Errorf("want %s and %s Events after the grace", ReasonPartitionsDropped, ReasonRetentionDecreaseApplied)
	}
}
