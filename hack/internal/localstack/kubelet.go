package localstack

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubelet plays the kubelet and the deployment controller for every consumer
// Deployment the operator manages (label app.kubernetes.io/managed-by=
// idempotency-operator), whoever created its IdempotentConsumer: it starts
// each Deployment's replicas as local processes exactly as its pod template
// says (StartReplicas), reports them in the Deployment's status once they
// answer /readyz (ReportLocalRollout), restarts them when the template's
// generation changes, and stops them when the Deployment goes. No kubelet
// runs next to envtest, so without it an object applied by hand would never
// get a running consumer. It also runs the Jobs the operator manages (a
// DeadLetterReplay's) once each, as local processes (RunJob).
type Kubelet struct {
	K8s     client.Client
	Binary  string    // cmd/consumer, standing in for the consumer image
	Work    string    // where the processes' logs go
	Verbose io.Writer // the processes' output, if set
	Log     func(format string, args ...any)
	// Skip, if set, names Deployments someone else runs.
	Skip func(types.NamespacedName) bool

	mu      sync.Mutex
	running map[types.NamespacedName]*localDeployment
	jobs    map[types.UID]bool // the Jobs started
	jobsWG  sync.WaitGroup
}

type localDeployment struct {
	generation int64
	consumers  []*Consumer
	failedAt   time.Time // the last start that failed: retried after kubeletRetry
}

const kubeletRetry = 5 * time.Second

// Run watches Deployments every 500ms until ctx ends, then stops every
// process it started.
func (k *Kubelet) Run(ctx context.Context) {
	defer k.stopAll()
	defer k.jobsWG.Wait() // RunJob stops its process when ctx ends
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Consumers returns the local replicas of Deployment ns/name.
func (k *Kubelet) Consumers(ns, name string) []*Consumer {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d := k.running[types.NamespacedName{Namespace: ns, Name: name}]; d != nil {
		return append([]*Consumer(nil), d.consumers...)
	}
	return nil
}

func (k *Kubelet) sync(ctx context.Context) {
	k.syncJobs(ctx)
	var list appsv1.DeploymentList
	if err := k.K8s.List(ctx, &list, client.MatchingLabels{"app.kubernetes.io/managed-by": "idempotency-operator"}); err != nil {
		if ctx.Err() == nil {
			k.Log("local kubelet: listing Deployments: %v", err)
		}
		return
	}
	seen := map[types.NamespacedName]bool{}
	for i := range list.Items {
		dep := &list.Items[i]
		key := client.ObjectKeyFromObject(dep)
		if k.Skip != nil && k.Skip(key) {
			continue
		}
		seen[key] = true
		k.mu.Lock()
		cur := k.running[key]
		k.mu.Unlock()
		if cur != nil && cur.generation == dep.Generation && (cur.failedAt.IsZero() || time.Since(cur.failedAt) < kubeletRetry) {
			continue
		}
		if cur != nil {
			stopConsumers(cur.consumers)
		}
		next := &localDeployment{generation: dep.Generation}
		if err := k.start(ctx, dep, next); err != nil {
			if ctx.Err() != nil {
				return
			}
			next.failedAt = time.Now()
			k.Log("local kubelet: Deployment %s: %v", key, err)
		}
		k.mu.Lock()
		if k.running == nil {
			k.running = map[types.NamespacedName]*localDeployment{}
		}
		k.running[key] = next
		k.mu.Unlock()
	}
	k.mu.Lock()
	for key, d := range k.running {
		if !seen[key] {
			stopConsumers(d.consumers)
			delete(k.running, key)
			k.Log("local kubelet: Deployment %s is gone; its processes stopped", key)
		}
	}
	k.mu.Unlock()
}

// syncJobs starts each unfinished managed Job not started yet.
func (k *Kubelet) syncJobs(ctx context.Context) {
	var list batchv1.JobList
	if err := k.K8s.List(ctx, &list, client.MatchingLabels{"app.kubernetes.io/managed-by": "idempotency-operator"}); err != nil {
		if ctx.Err() == nil {
			k.Log("local kubelet: listing Jobs: %v", err)
		}
		return
	}
	for i := range list.Items {
		job := &list.Items[i]
		k.mu.Lock()
		started := k.jobs[job.UID]
		if !started && !jobFinished(job) {
			if k.jobs == nil {
				k.jobs = map[types.UID]bool{}
			}
			k.jobs[job.UID] = true
			started = false
		} else {
			started = true
		}
		k.mu.Unlock()
		if started {
			continue
		}
		k.Log("local kubelet: running Job %s/%s as a local process", job.Namespace, job.Name)
		k.jobsWG.Go(func() {
			if err := RunJob(ctx, k.K8s, job, k.Binary, k.Work, k.Verbose); err != nil && ctx.Err() == nil {
				k.Log("local kubelet: Job %s/%s: %v", job.Namespace, job.Name, err)
			}
		})
	}
}

func (k *Kubelet) start(ctx context.Context, dep *appsv1.Deployment, d *localDeployment) error {
	if dep.Spec.Replicas != nil && *dep.Spec.Replicas == 0 {
		return nil
	}
	consumers, err := StartReplicas(ctx, k.K8s, dep, k.Binary, k.Work, k.Verbose)
	d.consumers = consumers
	if err != nil {
		return fmt.Errorf("starting its replicas: %w", err)
	}
	k.Log("local kubelet: started %d process(es) for Deployment %s/%s", len(consumers), dep.Namespace, dep.Name)
	if err := ReportLocalRollout(ctx, k.K8s, dep, consumers); err != nil {
		return fmt.Errorf("reporting its rollout: %w", err)
	}
	return nil
}

func (k *Kubelet) stopAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, d := range k.running {
		stopConsumers(d.consumers)
		delete(k.running, key)
	}
}

func stopConsumers(cs []*Consumer) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Stop(15 * time.Second) })
	}
	wg.Wait()
}
