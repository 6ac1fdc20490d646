package upgrade

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/idempotency-dev/operator/hack/internal/localstack"
)

// fleet plays the kubelet and the Deployment controller for the consumer
// Deployments of one namespace (envtest runs neither): when a Deployment's
// pod template changes, it stops the replicas' processes (SIGTERM, as a
// rollout does) and starts the binary of the image's build with the env the
// new template gives them, then reports the rollout complete. It also
// watches how many Deployments the operator has changed and not yet seen
// rolled out at once: the template-upgrade bound of docs/upgrade.md.
type fleet struct {
	k8s   client.Client
	ns    string
	bins  map[string]string // image tag -> consumer binary
	work  string
	out   io.Writer
	deps  map[string]*replicaSet
	mu    sync.Mutex
	phase string
	// per phase: the most Deployments changed and not rolled out at once,
	// and the rollouts (template changes) of each Deployment.
	maxPending map[string]int
	rollouts   map[string]map[string]int
	failures   []string
}

type replicaSet struct {
	hash     string
	tag      string
	running  []*localstack.Consumer
	restarts int
}

func newFleet(k8s client.Client, ns, work string, bins map[string]string, out io.Writer) *fleet {
	return &fleet{k8s: k8s, ns: ns, work: work, bins: bins, out: out, deps: map[string]*replicaSet{},
		maxPending: map[string]int{}, rollouts: map[string]map[string]int{}}
}

func (f *fleet) setPhase(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.phase = p
	f.rollouts[p] = map[string]int{}
}

// run steps until ctx ends.
func (f *fleet) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := f.step(ctx); err != nil && ctx.Err() == nil {
			f.mu.Lock()
			f.failures = append(f.failures, err.Error())
			f.mu.Unlock()
		}
		localstack.Sleep(ctx, 200*time.Millisecond)
	}
}

func templateHash(d *appsv1.Deployment) string {
	b, _ := json.Marshal(d.Spec.Template)
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func imageTag(d *appsv1.Deployment) string {
	img := d.Spec.Template.Spec.Containers[0].Image
	return img[strings.LastIndex(img, ":")+1:]
}

func (f *fleet) step(ctx context.Context) error {
	var list appsv1.DeploymentList
	if err := f.k8s.List(ctx, &list, client.InNamespace(f.ns)); err != nil {
		return err
	}
	pending := 0
	for i := range list.Items {
		if d := &list.Items[i]; d.Generation != d.Status.ObservedGeneration {
			pending++
		}
	}
	f.mu.Lock()
	phase := f.phase
	f.maxPending[phase] = max(f.maxPending[phase], pending)
	f.mu.Unlock()
	for i := range list.Items {
		d := &list.Items[i]
		h := templateHash(d)
		rs := f.deps[d.Name]
		if rs != nil && rs.hash == h && d.Status.ObservedGeneration == d.Generation {
			continue
		}
		if rs == nil || rs.hash != h {
			tag := imageTag(d)
			bin, ok := f.bins[tag]
			if !ok {
				return fmt.Errorf("deployment %s: image tag %q is neither build's", d.Name, tag)
			}
			if rs != nil {
				// Detach the old replicas before stopping them: exited,
				// polled by the test meanwhile, must not take a replica
				// this rollout stops for one that exited on its own.
				f.mu.Lock()
				old := rs.running
				rs.running = nil
				f.rollouts[phase][d.Name]++
				f.mu.Unlock()
				for _, c := range old {
					c.Stop(30 * time.Second)
				}
				fmt.Fprintf(f.out, "fleet: %s: rolling out template of image tag %s (phase %s)\n", d.Name, tag, phase)
			} else {
				rs = &replicaSet{}
				f.mu.Lock()
				f.deps[d.Name] = rs
				f.mu.Unlock()
			}
			rs.restarts++
			// Each rollout's pods log into a directory of their own.
			dir := filepath.Join(f.work, fmt.Sprintf("rollout-%d", rs.restarts))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			running, err := localstack.StartReplicas(ctx, f.k8s, d, bin, dir, nil)
			f.mu.Lock()
			rs.hash, rs.tag, rs.running = h, tag, running
			f.mu.Unlock()
			if err != nil {
				rs.hash = "" // start again next step
				return fmt.Errorf("deployment %s: %w", d.Name, err)
			}
		}
		if err := localstack.ReportLocalRollout(ctx, f.k8s, d, rs.running); err != nil {
			return fmt.Errorf("deployment %s: reporting rollout: %w", d.Name, err)
		}
	}
	return nil
}

// stop stops every consumer process.
func (f *fleet) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rs := range f.deps {
		for _, c := range rs.running {
			c.Stop(15 * time.Second)
		}
	}
}

// exited returns a consumer process that exited on its own, if any.
func (f *fleet) exited() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, rs := range f.deps {
		for _, c := range rs.running {
			if c.Exited() {
				return fmt.Sprintf("%s (%s): %v\n%s", name, filepath.Base(c.Name), c.ExitErr(), c.TailLog(20))
			}
		}
	}
	return ""
}

// snapshot returns what the fleet saw in phase.
func (f *fleet) snapshot(phase string) (maxPending int, rollouts map[string]int, failures []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := map[string]int{}
	for k, v := range f.rollouts[phase] {
		r[k] = v
	}
	return f.maxPending[phase], r, append([]string(nil), f.failures...)
}
