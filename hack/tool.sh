#!/usr/bin/env bash
# tool.sh NAME builds a developer tool pinned in hack/tools/go.mod (once per
# version, cached in the user's cache directory) and prints the binary's path.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: tool.sh NAME}"
case "$name" in
	golangci-lint) pkg=github.com/golangci/golangci-lint/v2/cmd/golangci-lint; mod=github.com/golangci/golangci-lint/v2 ;;
	*) echo "tool.sh: unknown tool $name" >&2; exit 2 ;;
esac
ver="$(cd "$root/hack/tools" && go list -m -f '{{.Version}}' "$mod")"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/idempotent-consumer-operator/tools/$name-$ver"
if [[ ! -x "$bin" ]]; then
	echo "tool.sh: building $name $ver (first use)" >&2
	mkdir -p "$(dirname "$bin")"
	(cd "$root/hack/tools" && go build -o "$bin.tmp" "$pkg") && mv "$bin.tmp" "$bin"
fi
echo "$bin"
