#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target in the module for FUZZTIME each (default
# 60s), one after another. New crashers are written by `go test` under the
# package's testdata/fuzz/<Target>/ and then fail plain `go test` runs until
# fixed; commit them as regression inputs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime="${FUZZTIME:-60s}"
failed=0
count=0
while IFS= read -r file; do
	dir="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+).*/\1/'); do
		count=$((count + 1))
		echo "fuzz: $dir $target for $fuzztime"
		if ! go test "$dir" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime"; then
			echo "fuzz: $dir $target FAILED" >&2
			failed=$((failed + 1))
		fi
	done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
echo "fuzz: $count targets, $failed failed"
[[ $count -gt 0 && $failed -eq 0 ]]
