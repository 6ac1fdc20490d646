#!/usr/bin/env bash
# envtest.sh prints a directory holding kube-apiserver, etcd and kubectl for the
# Kubernetes release that go.mod uses, for KUBEBUILDER_ASSETS.
#
#   - KUBEBUILDER_ASSETS already set and complete: it is used as is.
#   - Otherwise the binaries are built from source through the Go module proxy, in
#     the nested module hack/envtest, and cached outside the clone in the user's
#     cache directory, keyed by the versions, so every clone on this machine
#     shares one build. The first build takes about 10 minutes on 2 cores.
#
# Progress goes to stderr; stdout is only the directory.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="$root/hack/envtest"

have_all() { [[ -x "$1/kube-apiserver" && -x "$1/etcd" && -x "$1/kubectl" ]]; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
	if have_all "$KUBEBUILDER_ASSETS"; then
		echo "$KUBEBUILDER_ASSETS"
		exit 0
	fi
	echo "envtest: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks kube-apiserver, etcd or kubectl; building" >&2
fi

modver() { (cd "$1" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$2"); }

api_ver="$(modver "$root" k8s.io/api)"          # v0.Y.Z in the main module
kube_ver="$(modver "$mod" k8s.io/kubernetes)"   # v1.Y.Z in hack/envtest
staging_ver="$(modver "$mod" k8s.io/api)"
etcd_ver="$(modver "$mod" go.etcd.io/etcd/server/v3)"
if [[ "$api_ver" != "$staging_ver" || "v1${api_ver#v0}" != "$kube_ver" ]]; then
	echo "envtest: version skew: go.mod has k8s.io/api $api_ver but hack/envtest builds kubernetes $kube_ver (staging $staging_ver); update hack/envtest/go.mod" >&2
	exit 1
fi

# "-v2": built with the release's version stamped in (below); a cache from
# before says v0.0.0-master+$Format:%H$, which kubectl version cannot parse.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/idempotent-consumer-operator/envtest/kubernetes-${kube_ver}-etcd-${etcd_ver}-$(go env GOOS)-$(go env GOARCH)-v2"
if have_all "$cache"; then
	echo "$cache"
	exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# version_ldflags stamps the Kubernetes release into kube-apiserver and kubectl
# as the release build does (hack/lib/version.sh upstream), so that
# `kubectl version` against the local API server reports and parses it.
version_ldflags() {
	local minor="${kube_ver#v1.}"
	minor="${minor%%.*}"
	local p
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		printf ' -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean' "$p" "$kube_ver" "$p" "$p" "$minor" "$p"
	done
}
build() {
	local name="$1" pkg="$2" start=$SECONDS
	echo "envtest: building $name ($pkg) into $cache ..." >&2
	local total n=0
	total="$(cd "$mod" && go list -deps "$pkg" 2>/dev/null | wc -l)" || total="?"
	# go build -v names each package as it compiles it (cached ones are not
	# named); count them so a first build shows it is moving. Other lines
	# (errors) pass through.
	(cd "$mod" && CGO_ENABLED=0 go build -v -trimpath -ldflags="-s $(version_ldflags)" -o "$tmp/$name" "$pkg" 2>&1) |
		while IFS= read -r line; do
			if [[ "$line" =~ ^[^\ :]+$ ]]; then
				n=$((n + 1))
				if ((n % 100 == 0)); then
					echo "envtest: $name: $n of at most $total packages compiled ($((SECONDS - start))s)" >&2
				fi
			else
				echo "$line" >&2
			fi
		done
	echo "envtest: built $name in $((SECONDS - start))s" >&2
}
echo "envtest: first build of the control plane for kubernetes $kube_ver, etcd $etcd_ver (about 10 minutes on 2 cores; cached afterwards)" >&2
[[ -x "$cache/etcd" ]] || build etcd go.etcd.io/etcd/server/v3
[[ -x "$cache/kube-apiserver" ]] || build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
[[ -x "$cache/kubectl" ]] || build kubectl k8s.io/kubernetes/cmd/kubectl
# Move each binary in only when complete, so an interrupted build is never mistaken for a cached one.
for f in "$tmp"/*; do [[ -e "$f" ]] && mv "$f" "$cache/"; done
echo "$cache"
