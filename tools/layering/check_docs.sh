#!/usr/bin/env bash
# The docs and the build agree: every binary the README's table names ("| `ds-x ...` | ... |")
# is in bin/ after tools/build.sh, and every integration test (tests/integration/*_test.sh) has
# its line in tests/README.md. Fails naming what is missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
bad=0
named=$(sed -n '/^## Binaries/,/^## /p' README.md | grep -oE '^\| `ds-[a-z-]+' | cut -c4- | sort -u)
[[ -n $named ]] || { echo "check_docs: README.md has no binaries table"; exit 1; }
for b in $named; do
  [[ -x bin/$b ]] || { echo "check_docs: README.md names $b, but bin/$b is missing (tools/build.sh)"; bad=1; }
done
for t in tests/integration/*_test.sh; do
  name=${t##*/}
  grep -q "^| \`$name\` |" tests/README.md ||
    { echo "check_docs: tests/README.md does not list $name"; bad=1; }
done
[[ $bad == 0 ]] && echo "check_docs: bin/ holds the README's $(echo $named | wc -w) binaries; tests/README.md lists all $(ls tests/integration/*_test.sh | wc -l) integration tests"
exit $bad
