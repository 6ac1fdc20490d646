package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/hack/internal/localstack"
	"github.com/idempotency-dev/operator/hack/internal/proc"
)

const (
	ns         = "upgrade"
	partitions = 2
	// The template-upgrade bound's default (docs/upgrade.md): 10% of the
	// consumer Deployments, rounded up. Both builds run with the default.
	boundPercent = 10
)

// object is one IdempotentConsumer of the test and how its effects are
// counted: rows of upgrade_applied (SQL sink), requests to the provider
// (HTTP sink), or none (table only).
type object struct {
	name, kind, table, topic, group string
}

func (o object) consumes() bool { return o.kind != "table-only" }

// objects: a few of every kind the operator supports. The shared pair read
// one topic with their own groups and share one dedup table.
var objects = []object{
	{"sql-1", "sql", "upg_sql_1", "t-sql-1", "g-sql-1"},
	{"sql-2", "sql", "upg_sql_2", "t-sql-2", "g-sql-2"},
	{"http-1", "http", "upg_http_1", "t-http-1", "g-http-1"},
	{"http-2", "http", "upg_http_2", "t-http-2", "g-http-2"},
	{"tableonly-1", "table-only", "upg_tableonly_1", "t-tableonly-1", "g-tableonly-1"},
	{"tableonly-2", "table-only", "upg_tableonly_2", "t-tableonly-2", "g-tableonly-2"},
	{"shared-a", "shared", "upg_shared", "t-shared", "g-shared-a"},
	{"shared-b", "shared", "upg_shared", "t-shared", "g-shared-b"},
}

// manifest is the object as a user writes it: only fields of v1alpha1 as
// it was at its first release, so both builds' CRDs take it.
func (o object) manifest(brokers []string, providerURL string) *unstructured.Unstructured {
	spec := map[string]any{
		"kafka":    map[string]any{"bootstrapServers": toAny(brokers), "topic": o.topic, "groupID": o.group},
		"database": map[string]any{"urlSecretRef": map[string]any{"name": "db", "key": "url"}, "table": o.table},
		"dedup":    map[string]any{"retention": "168h", "interval": "Daily"},
	}
	switch o.kind {
	case "sql", "shared":
		spec["consumer"] = map[string]any{"replicas": int64(1), "sink": map[string]any{"type": "SQL", "sql": map[string]any{
			"statement": fmt.Sprintf("INSERT INTO upgrade_applied (obj, event_id) VALUES ('%s', $1)", o.name),
		}}}
	case "http":
		spec["consumer"] = map[string]any{"replicas": int64(1), "sink": map[string]any{"type": "HTTP", "http": map[string]any{
			"url": providerURL + "/" + o.name,
		}}}
	}
	if o.kind == "shared" {
		spec["dedup"].(map[string]any)["sharing"] = "Shared"
		spec["dedup"].(map[string]any)["scope"] = "ConsumerGroup"
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kafka.idempotency.dev/v1alpha1", "kind": "IdempotentConsumer",
		"metadata": map[string]any{"name": o.name, "namespace": ns},
		"spec":     spec,
	}}
	return u
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

const appliedDDL = `CREATE TABLE upgrade_applied (
	id bigserial PRIMARY KEY,
	obj text NOT NULL,
	event_id uuid NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// fromRef is what the test upgrades from: the latest release tag, else
// DefaultFrom.
func fromRef(t *testing.T, root string) string {
	if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--abbrev=0").Output(); err == nil {
		if tag := strings.TrimSpace(string(out)); tag != "" {
			return tag
		}
	}
	return DefaultFrom
}

// oldTree checks out ref in a git worktree of the clone (removed when the
// test ends). A missing commit fails the test: it never skips.
func oldTree(t *testing.T, root, ref string) string {
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", ref+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("upgrade test: the commit to upgrade from, %s, is not in this clone's history (%v: %s); "+
			"a shallow clone lacks it: run `git fetch --unshallow` (or fetch with --depth 0 / fetch-depth: 0 in CI)", ref, err, out)
	}
	dir := filepath.Join(t.TempDir(), "old")
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", dir, ref).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s %s: %v: %s", dir, ref, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", dir).CombinedOutput(); err != nil {
			t.Logf("git worktree remove %s: %v: %s", dir, err, out)
		}
		_ = exec.Command("git", "-C", root, "worktree", "prune").Run()
	})
	return dir
}

// table is what the test reads of one dedup table: its identity (a
// migration in place keeps it), its marker, its positions table's marker
// and its rows.
type table struct {
	oid               int64
	marker, positions string
	version, posVer   int
	rows              int64
}

func readTable(ctx context.Context, conn *pgx.Conn, name string) (table, error) {
	var tb table
	var pos *string
	err := conn.QueryRow(ctx, `SELECT c.oid::bigint, coalesce(obj_description(c.oid, 'pg_class'), ''),
		(SELECT obj_description(p.oid, 'pg_class') FROM pg_class p WHERE p.oid = to_regclass($2))
		FROM pg_class c WHERE c.oid = to_regclass($1)`, "public."+name, "public."+name+"_offsets").Scan(&tb.oid, &tb.marker, &pos)
	if err != nil {
		return tb, fmt.Errorf("reading table %s: %w", name, err)
	}
	if pos != nil {
		tb.positions = *pos
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{"public", name}.Sanitize()).Scan(&tb.rows); err != nil {
		return tb, err
	}
	tb.version, tb.posVer = markerVersion(tb.marker), markerVersion(tb.positions)
	return tb, nil
}

// markerVersion is the marker's "version" (0 without one, -1 unreadable).
func markerVersion(marker string) int {
	if marker == "" {
		return 0
	}
	var m map[string]any
	if json.Unmarshal([]byte(marker), &m) != nil {
		return -1
	}
	v, _ := m["version"].(float64)
	return int(v)
}

func condition(u *unstructured.Unstructured, typ string) (status, reason, msg string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			status, _ = m["status"].(string)
			reason, _ = m["reason"].(string)
			msg, _ = m["message"].(string)
		}
	}
	return
}

func TestUpgradeFromOlderBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two trees and runs envtest and PostgreSQL: skipped with -short")
	}
	started := time.Now()
	ctrllog.SetLogger(logr.Discard()) // envtest's own start-up lines
	// Building two trees may take minutes on a cold cache: the run's
	// deadline starts after the builds.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	step := localstack.Steps(os.Stdout, "upgrade")
	root, err := proc.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	from := fromRef(t, root)
	fromCommit := from
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", from+"^{commit}").Output(); err == nil {
		fromCommit = strings.TrimSpace(string(out))
	}
	old := oldTree(t, root, from)
	work := t.TempDir()
	step("building manager and consumer from %s and from this tree", from)
	oldBin, newBin := filepath.Join(work, "old"), filepath.Join(work, "new")
	if err := proc.Build(ctx, old, oldBin, "./cmd/manager", "./cmd/consumer"); err != nil {
		t.Fatalf("building %s: %v", from, err)
	}
	if err := proc.Build(ctx, root, newBin, "./cmd/manager", "./cmd/consumer"); err != nil {
		t.Fatal(err)
	}
	step("built in %.0fs", time.Since(started).Seconds())
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	oldCRDs, err := localstack.RenderCRDs(old)
	if err != nil {
		t.Fatal(err)
	}
	newCRDs, err := localstack.RenderCRDs(root)
	if err != nil {
		t.Fatal(err)
	}

	var cl proc.Cleanup
	t.Cleanup(cl.Run)
	step("starting PostgreSQL, the broker and the control plane (the CRD of %s)", from)
	pg, dbURL, err := localstack.StartPostgres(ctx, &cl, "upgrade", []string{appliedDDL})
	if err != nil {
		t.Fatal(err)
	}
	_ = pg
	kafka, err := consumertest.StartKafka(consumertest.KafkaOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Add(kafka.Close)
	brokers := kafka.Brokers()
	assets, err := localstack.ControlPlaneAssets(ctx, root, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	env, err := localstack.StartControlPlane(assets, oldCRDs, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cl.Add(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	k8s, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	prov := &provider{calls: map[string]map[string]int{}}
	srv := httptest.NewServer(prov)
	cl.Add(srv.Close)

	for _, o := range objects {
		// The topic and its dead-letter topic (the default name): the
		// consumer waits for both.
		if err := consumertest.CreateTopic(ctx, brokers, o.topic, partitions, nil); err != nil {
			t.Fatal(err)
		}
		if err := consumertest.CreateTopic(ctx, brokers, o.topic+".dlq", 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"url": dbURL}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		if err := k8s.Create(ctx, o.manifest(brokers, srv.URL)); err != nil {
			t.Fatalf("creating %s: %v", o.name, err)
		}
	}
	deployments := 0
	for _, o := range objects {
		if o.consumes() {
			deployments++
		}
	}
	bound := int(math.Ceil(float64(deployments) * boundPercent / 100))

	// The two builds differ in their consumer image's tag, as releases do;
	// the fleet runs each tag's consumer binary.
	fl := newFleet(k8s, ns, work, map[string]string{"old": filepath.Join(oldBin, "consumer"), "new": filepath.Join(newBin, "consumer")}, os.Stdout)
	fl.setPhase("install")
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := make(chan struct{})
	go func() { defer close(fleetDone); fl.run(fctx) }()
	cl.Add(func() { stopFleet(); <-fleetDone; fl.stop() })

	var mgr *proc.Process
	startManager := func(name, bin, tag string) {
		t.Helper()
		mgrEnv := append(os.Environ(), "KUBECONFIG="+kubeconfig)
		mgr, err = proc.Start(name, proc.Options{LogDir: work, Env: mgrEnv}, bin,
			"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
			"--consumer-image=upgrade.test/consumer:"+tag)
		if err != nil {
			t.Fatal(err)
		}
		m := mgr
		cl.Add(func() { m.Stop(10 * time.Second) })
	}
	// settled waits until every object is Ready (want true) for its current
	// generation and every Deployment runs tag, rolled out; or, for the
	// objects in refused, until they are Stalled on the newer layout.
	settled := func(what, tag string, refused map[string]bool) time.Duration {
		tagOf := map[string]string{}
		for _, o := range objects {
			tagOf[o.name] = tag
			if refused[o.table] {
				tagOf[o.name] = "new" // left as it is
			}
		}
		t.Helper()
		t0 := time.Now()
		var last string
		for deadline := time.Now().Add(3 * time.Minute); ; {
			last = ""
			for _, o := range objects {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("kafka.idempotency.dev/v1alpha1")
				u.SetKind("IdempotentConsumer")
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.name}, u); err != nil {
					t.Fatal(err)
				}
				observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
				ready, _, msg := condition(u, "Ready")
				if refused[o.table] {
					if st, reason, _ := condition(u, "DatabaseReady"); st != "False" || reason != "TableLayoutNewerThanOperator" {
						last += fmt.Sprintf(" %s: DatabaseReady %s %s, want False TableLayoutNewerThanOperator;", o.name, st, reason)
					}
					continue
				}
				if ready != "True" || observed != u.GetGeneration() {
					last += fmt.Sprintf(" %s: Ready=%s (%s) observed %d of %d;", o.name, ready, msg, observed, u.GetGeneration())
				}
			}
			var deps appsv1.DeploymentList
			if err := k8s.List(ctx, &deps, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(deps.Items) != deployments {
				last += fmt.Sprintf(" %d Deployments, want %d;", len(deps.Items), deployments)
			}
			for i := range deps.Items {
				d := &deps.Items[i]
				if tg := imageTag(d); tg != tagOf[strings.TrimSuffix(d.Name, "-consumer")] || d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != ptrOr(d.Spec.Replicas) {
					last += fmt.Sprintf(" Deployment %s: tag %s, generation %d observed %d;", d.Name, tg, d.Generation, d.Status.ObservedGeneration)
				}
			}
			if last == "" {
				return time.Since(t0)
			}
			if mgr.Exited() {
				t.Fatalf("%s: the manager exited: %v\n%s", what, mgr.ExitErr(), mgr.TailLog(30))
			}
			if e := fl.exited(); e != "" {
				t.Fatalf("%s: a consumer exited on its own: %s", what, e)
			}
			if time.Now().After(deadline) {
				_, _, failures := fl.snapshot("")
				t.Fatalf("%s: not settled within 3 minutes:%s\nfleet failures: %v\nmanager log:\n%s", what, last, failures, mgr.TailLog(40))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cl.Add(func() { _ = conn.Close(context.Background()) })
	tables := func() map[string]table {
		t.Helper()
		out := map[string]table{}
		for _, o := range objects {
			tb, err := readTable(ctx, conn, o.table)
			if err != nil {
				t.Fatal(err)
			}
			out[o.table] = tb
		}
		return out
	}

	// 1. The older build: its CRD, its manager, its consumers, under traffic.
	step("older build %s: manager and consumers", from)
	startManager("manager-old", filepath.Join(oldBin, "manager"), "old")
	settled("install ("+from+")", "old", nil)
	var producers []*producer
	pctx, stopTraffic := context.WithCancel(ctx)
	trafficDone := make(chan struct{})
	seen := map[string]bool{}
	nprod := 0
	for _, o := range objects {
		if !o.consumes() || seen[o.topic] {
			continue
		}
		seen[o.topic] = true
		p := newProducer(o.topic)
		producers = append(producers, p)
		nprod++
		go func(p *producer, seed uint64) {
			defer func() { trafficDone <- struct{}{} }()
			p.run(pctx, brokers, 40*time.Millisecond, seed)
		}(p, uint64(nprod))
	}
	cl.Add(func() {
		stopTraffic()
		for range producers {
			<-trafficDone
		}
	})
	time.Sleep(5 * time.Second)
	before := tables()

	// 2. The upgrade, in the documented order: the CRD, then the manager.
	step("upgrading: this tree's CRD, then its manager (consumers keep running)")
	fl.setPhase("upgrade")
	applyCRDs(ctx, t, k8s, newCRDs)
	mgr.Stop(30 * time.Second)
	upgradeStart := time.Now()
	startManager("manager-new", filepath.Join(newBin, "manager"), "new")
	settled("upgrade", "new", nil)
	readyAfter := time.Since(upgradeStart)
	after := tables()
	for name, b := range before {
		a := after[name]
		if a.oid != b.oid {
			t.Errorf("table %s was replaced by the upgrade (oid %d -> %d), not migrated in place", name, b.oid, a.oid)
		}
		if a.version < b.version || a.posVer < b.posVer || a.version < 0 || a.posVer < 0 {
			t.Errorf("table %s: layout version %d -> %d, positions %d -> %d (marker %q -> %q)", name, b.version, a.version, b.posVer, a.posVer, b.marker, a.marker)
		}
		if a.rows < b.rows {
			t.Errorf("table %s lost dedup rows in the upgrade: %d -> %d", name, b.rows, a.rows)
		}
	}
	upMax, upRollouts, _ := fl.snapshot("upgrade")
	checkRollouts(t, "upgrade", upMax, upRollouts, bound, deployments)
	step("upgrade settled after %.1fs; at most %d Deployment(s) rolling at once (bound %d)", readyAfter.Seconds(), upMax, bound)
	time.Sleep(3 * time.Second)

	// 3. The downgrade: the older manager against the newer tables; the CRD
	// stays the newer one (docs/upgrade.md, Rolling back).
	step("downgrading: the manager of %s against this tree's tables", from)
	fl.setPhase("downgrade")
	refused := map[string]bool{}
	for name, b := range before {
		if a := after[name]; a.version > b.version {
			refused[name] = true
		}
	}
	mgr.Stop(30 * time.Second)
	startManager("manager-old-again", filepath.Join(oldBin, "manager"), "old")
	// A refused object is Stalled and its Deployment left as it is; the
	// others roll back to the older template.
	settled("downgrade", "old", refused)
	down := tables()
	for name := range refused {
		if down[name].marker != after[name].marker || down[name].oid != after[name].oid {
			t.Errorf("downgrade touched the newer table %s: marker %q -> %q", name, after[name].marker, down[name].marker)
		}
	}
	downMax, downRollouts, _ := fl.snapshot("downgrade")
	downBound := bound
	if _, err := os.Stat(filepath.Join(old, "controllers", "confighash.go")); err != nil {
		// A release before the keyed config hash reads this tree's hash as
		// a rotated Secret and rolls every Deployment at once (docs/upgrade.md,
		// Rolling back): the bound holds on the way up, not back.
		downBound = deployments
	}
	checkRollouts(t, "downgrade", downMax, downRollouts, downBound, deployments-len(refused))
	time.Sleep(3 * time.Second)

	// 4. Every event produced across both switches: applied exactly once.
	step("stopping traffic; waiting for every group to catch up")
	stopTraffic()
	for range producers {
		<-trafficDone
	}
	producers2 := producers
	producers = nil
	for _, o := range objects {
		if !o.consumes() {
			continue
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
			lag, err := consumertest.GroupLag(ctx, brokers, o.group, o.topic, partitions)
			if err == nil && lag == 0 {
				break
			}
			if e := fl.exited(); e != "" {
				t.Fatalf("a consumer exited on its own: %s", e)
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %s: lag %d (%v) after 2 minutes", o.group, lag, err)
			}
		}
	}
	var total tally
	for _, o := range objects {
		if !o.consumes() {
			continue
		}
		var p *producer
		for _, q := range producers2 {
			if q.topic == o.topic {
				p = q
			}
		}
		var applied map[string]int
		if o.kind == "http" {
			prov.mu.Lock()
			applied = maps(prov.calls[o.name])
			prov.mu.Unlock()
		} else if applied, err = appliedSQL(ctx, conn, o.name); err != nil {
			t.Fatal(err)
		}
		tl := p.check(applied)
		t.Logf("%s (%s): %d events, lost %d, applied twice %d, unknown %d", o.name, o.kind, tl.events, tl.lost, tl.duplicates, tl.unknown)
		if tl.lost > 0 || tl.duplicates > 0 || tl.unknown > 0 || tl.events == 0 {
			t.Errorf("%s (%s): %d events, %d lost, %d applied twice, %d applied but never produced", o.name, o.kind, tl.events, tl.lost, tl.duplicates, tl.unknown)
		}
		total.events += tl.events
		total.lost += tl.lost
		total.duplicates += tl.duplicates
	}
	if prov.nokeys > 0 {
		t.Errorf("%d HTTP sink requests without an Idempotency-Key", prov.nokeys)
	}
	fmt.Printf("RESULT upgrade from=%s objects=%d events=%d lost=%d duplicates_applied=%d ready_after_s=%.1f downgrade_refused_tables=%d max_rolling_upgrade=%d max_rolling_downgrade=%d bound=%d took_s=%.0f\n",
		fromCommit, len(objects), total.events, total.lost, total.duplicates, readyAfter.Seconds(), len(refused), upMax, downMax, bound, time.Since(started).Seconds())
}

func ptrOr(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkRollouts: the operator's template change reached each Deployment at
// most once, never more than bound at a time (docs/upgrade.md).
func checkRollouts(t *testing.T, phase string, maxPending int, rollouts map[string]int, bound, want int) {
	t.Helper()
	if maxPending > bound {
		t.Errorf("%s: %d Deployments were changed and not rolled out at once; the template-upgrade bound is %d", phase, maxPending, bound)
	}
	var names []string
	for name, n := range rollouts {
		names = append(names, name)
		if n > 1 {
			t.Errorf("%s: Deployment %s rolled out %d times, want once", phase, name, n)
		}
	}
	slices.Sort(names)
	if len(names) > want {
		t.Errorf("%s: %d Deployments rolled out (%v), want at most %d", phase, len(names), names, want)
	}
}

// applyCRDs updates the installed CRDs to crds (kubectl apply of the new
// crds.yaml).
func applyCRDs(ctx context.Context, t *testing.T, k8s client.Client, crds []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	for _, crd := range crds {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		err := k8s.Get(ctx, client.ObjectKey{Name: crd.Name}, cur)
		switch {
		case err == nil:
			crd.ResourceVersion = cur.ResourceVersion
			err = k8s.Update(ctx, crd)
		case apierrors.IsNotFound(err):
			err = k8s.Create(ctx, crd)
		}
		if err != nil {
			t.Fatalf("applying CRD %s: %v", crd.Name, err)
		}
	}
}
