package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

const reference = "../../docs/api-reference.md"

// TestReferenceUpToDate fails when docs/api-reference.md differs from what
// the API types generate.
func TestReferenceUpToDate(t *testing.T) {
	want, err := Generate("../../api/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/api-reference.md is stale (first difference at line %d):\n have: %s\n want: %s\nregenerate it: go run ./hack/apidocs > docs/api-reference.md", i+1, g, w)
		}
	}
}

// TestGenerate checks the generator on the real types: every field of the
// spec is documented with its JSON name, and markers become columns.
func TestGenerate(t *testing.T) {
	out, err := Generate("../../api/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"Group `kafka.idempotency.dev`, version `v1alpha1`.",
		"## IdempotentConsumerSpec",
		"| `kafka` | [KafkaSpec](#kafkaspec) | yes |",
		"| `deletionPolicy` | [DeletionPolicy](#deletionpolicy) | no | `Retain` | one of `Retain`, `Delete` |",
		"| `retention` | string (duration) | no | `168h` |",
		"| `premake` | int32 | no | `4` | value 1 to 90 |",
		"| `resources` | [corev1.ResourceRequirements](https://pkg.go.dev/k8s.io/api/core/v1#ResourceRequirements) | no |",
		"schema must not be a PostgreSQL reserved word",
		"| `apiVersion` | string | yes | | `kafka.idempotency.dev/v1alpha1` |",
		"| short names | `ic`, `idc` |",
		"### OutOfWindowPolicy",
		"| `Process` | OutOfWindowProcess processes the event without deduplication. |",
		"| `Stalled` |",
		"`TableNotOwned`",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	if strings.Contains(s, "+kubebuilder") || strings.Contains(s, "+optional") {
		t.Error("markers leaked into the descriptions")
	}
	if _, err := Generate(t.TempDir()); err == nil {
		t.Error("Generate of an empty directory succeeded")
	}
}
