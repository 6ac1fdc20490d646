#!/usr/bin/env bash
# tool.sh NAME builds a developer tool pinned in a tool module under hack/tools
# (once per version, cached in the user's cache directory) and prints the
# binary's path. It exits non-zero, printing nothing on stdout, when the tool
# can't be built (for example offline with a cold module cache).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: tool.sh NAME}"
case "$name" in
	golangci-lint) dir=hack/tools; pkg=github.com/golangci/golangci-lint/v2/cmd/golangci-lint; mod=github.com/golangci/golangci-lint/v2 ;;
	# A module of its own: its YAML library conflicts with golangci-lint's.
	actionlint) dir=hack/tools/actionlint; pkg=github.com/rhysd/actionlint/cmd/actionlint; mod=github.com/rhysd/actionlint ;;
	*) echo "tool.sh: unknown tool $name" >&2; exit 2 ;;
esac
ver="$(cd "$root/$dir" && go list -m -f '{{.Version}}' "$mod")"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/idempotent-consumer-operator/tools/$name-$ver"
if [[ ! -x "$bin" ]]; then
	echo "tool.sh: building $name $ver (first use)" >&2
	mkdir -p "$(dirname "$bin")"
	# The version the tool reports (actionlint -version) comes from -X.
	ldflags=""
	[[ "$name" == actionlint ]] && ldflags="-X github.com/rhysd/actionlint.version=$ver"
	if ! (cd "$root/$dir" && go build -ldflags="$ldflags" -o "$bin.tmp" "$pkg"); then
		rm -f "$bin.tmp"
		echo "tool.sh: building $name $ver failed" >&2
		exit 1
	fi
	mv "$bin.tmp" "$bin"
fi
echo "$bin"
