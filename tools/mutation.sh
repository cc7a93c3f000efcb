#!/usr/bin/env bash
# `make mutation`: mutation testing of pgad with mutmut (configured in pyproject.toml, [tool.mutmut]) over the
# in-process tests, then tools/mutate_rules.py over the rules tables mutmut cannot reach, then the results.
#
#   MUTATION_JOBS=N    worker processes (default: nproc)
#   MUTATION_FRESH=1   forget the previous run's results (mutants/): mutmut otherwise re-tests only the functions that
#                      changed since, and keeps the verdicts of the rest, even where the tests have changed
#   MUTMUT_ARGS=...    mutant names or globs for `mutmut run`, e.g. 'pgad.jit.codegen.*' (default: all)
#   RULES_ARGS=...     arguments of tools/mutate_rules.py, e.g. 'pow sin' ('-' skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DEV:-.venv}/bin
JOBS=${MUTATION_JOBS:-$(nproc)}

# The mutated copies of the sources are large (every mutant of a file is in it): compile each once, not in each of
# the thousands of test processes.
unset PYTHONDONTWRITEBYTECODE
# A temporary directory of this run's own, for pytest's tmp_path and anything else the tests write: nothing on disk
# (a kernel cache, say) is shared with another run, or outlives this one.
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/pgad-mutation.XXXXXX")
chmod 755 "$TMPDIR"  # as root, the throwaway clusters in it run as the postgres user (pgad/throwaway.py)
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

# One throwaway PostgreSQL for every test process (tests/conftest.py reads PGAD_TEST_PORT): without it each mutant's
# tests of pgad.api and pgad.loader would run initdb and start a cluster of their own.
with_cluster() {
    "$BIN/python" -c 'import os, subprocess, sys
from pgad.throwaway import Cluster
with Cluster() as pg:
    os.environ["PGAD_TEST_PORT"] = str(pg.settings["port"])
    sys.exit(subprocess.call(sys.argv[1:]))' "$@"
}

if [[ -n ${MUTATION_FRESH:-} ]]; then rm -rf mutants; fi
started=$SECONDS
# shellcheck disable=SC2086
with_cluster "$BIN/mutmut" run --max-children "$JOBS" ${MUTMUT_ARGS:-}
echo "mutmut: $((SECONDS - started)) s"
rules=""
if [[ ${RULES_ARGS:-} != - ]]; then
    # shellcheck disable=SC2086
    rules=$(with_cluster "$BIN/python" tools/mutate_rules.py -j "$JOBS" ${RULES_ARGS:-})
fi
echo
"$BIN/python" tools/mutation_summary.py
if [[ -n $rules ]]; then
    echo
    echo "$rules"
fi
echo
echo "mutation testing: $((SECONDS - started)) s; 'mutmut show NAME' shows a mutant, 'mutmut browse' all of them"
