#!/usr/bin/env bash
# `make mutation`: mutation testing of pgad with mutmut (configured in pyproject.toml, [tool.mutmut]) over the
# in-process tests, then tools/mutate_rules.py over the rules tables mutmut cannot reach, then the results.
#
#   MUTATION_JOBS=N    worker processes (default: nproc)
#   MUTATION_FRESH=1   forget the previous run's results (mutants/): mutmut otherwise re-tests only the functions that
#                      changed since, and keeps the verdicts of the rest, even where the tests have changed
#   MUTMUT_ARGS=...    mutant names or globs for `mutmut run`, e.g. 'pgad.jit.codegen.*' (default: all)
#   RULES_ARGS=...     arguments of tools/mutate_rules.py, e.g. 'pow sin' ('-' skips it)
#   MUTATION_SCOPE=S   mutmut as tools/mutation-S.toml says instead, in build/mutation-S/ (its mutants/ and results
#                      apart from the in-process run's), with a server that imports the mutated modules, so that the
#                      SQL tests run the mutants too (tools/mutation_server/); no rules. S: models (pgad's model code)
#   MUTATE=FILES       with MUTATION_SCOPE=S: a scope of these source files alone (tools/mutation_scope.py writes its
#   MUTATION_TESTS=... pyproject.toml from tools/mutation-models.toml), whose mutants run these test files; its stats
#                      run runs them alone. Where FILES hold a code generator (pgad/jit/), the server keeps no kernel
#                      on disk: a kernel cached by one mutant (or the stats run) would answer for the next.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/${DEV:-.venv}/bin
JOBS=${MUTATION_JOBS:-$(nproc)}
TOOLS=$PWD/tools

# mutmut forks each mutant's test process from one that has run the tests (its stats run): an OpenMP pool that torch
# (an oracle of the tests) started there would deadlock the fork's first parallel torch call, and the mutant would
# count as timed out, that is, detected. One thread makes no pool.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
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
# PGAD_MUTATION_SERVER, where set, is the server's PYTHONPATH (not the tests'). Without a GPU the server runs the cuda
# backend on numba's simulator, as tests/conftest.py's servers do. A mutant that loops in a backend (the versions
# scope's own_names 9 did: a NULL in _version_function_name's `taken` is never unequal) outlives the test process
# mutmut kills at its timeout, and took a core for the rest of the run: the server checks once a second that the
# client is still there.
with_cluster() {
    "$BIN/python" -c 'import os, subprocess, sys
from pgad.throwaway import Cluster
settings = {"pgad.cache_directory": ""} if "pgad/jit/" in os.environ.get("MUTATE", "") else {}
settings["client_connection_check_interval"] = "1s"  # a mutant looping in a backend stops once its test is killed
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0" if os.path.exists("/dev/nvidiactl") else "1")
server = os.environ.pop("PGAD_MUTATION_SERVER", None)
tests = dict(os.environ)
if server:
    os.environ["PYTHONPATH"] = server
    # the mutated copies (megabytes: every mutant of a file) compiled once, where the postgres user may write, not
    # in each backend: the postgres user may not write in mutants/
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(os.environ["TMPDIR"], "pycache")
    os.mkdir(os.environ["PYTHONPYCACHEPREFIX"])
    os.chmod(os.environ["PYTHONPYCACHEPREFIX"], 0o1777)  # the umask cuts the mode of mkdir
with Cluster(server_settings=settings) as pg:
    os.environ.clear()
    os.environ.update(tests, PGAD_TEST_PORT=str(pg.settings["port"]))
    sys.exit(subprocess.call(sys.argv[1:]))' "$@"
}

if [[ -n ${MUTATION_SCOPE:-} ]]; then
    RUN=build/mutation-$MUTATION_SCOPE
    mkdir -p "$RUN"
    if [[ -n ${MUTATE:-} ]]; then
        "$BIN/python" tools/mutation_scope.py "$MUTATE" "${MUTATION_TESTS:?MUTATE needs MUTATION_TESTS}" > "$RUN/pyproject.toml"
    else
        cp "tools/mutation-$MUTATION_SCOPE.toml" "$RUN/pyproject.toml"
    fi
    ln -sfn ../../pgad "$RUN/pgad"
    ln -sfn ../../tests "$RUN/tests"
    ln -sfn ../../tools "$RUN/tools"  # the fork server's preload_modules_file
    # The server imports the mutated modules from $RUN/mutants; its backends write the functions they called, in
    # mutmut's stats run, to files in hits/ (tests/conftest.py).
    export PGAD_MUTATION_DIR=$PWD/$RUN PGAD_MUTATION_SERVER=$TOOLS/mutation_server PGAD_MUTATION_HITS=$TMPDIR/hits
    mkdir -m 1777 "$PGAD_MUTATION_HITS"
    RULES_ARGS=-
    cd "$RUN"
fi

if [[ -n ${MUTATION_FRESH:-} ]]; then rm -rf mutants; fi
started=$SECONDS
# shellcheck disable=SC2086
with_cluster "$BIN/mutmut" run --max-children "$JOBS" ${MUTMUT_ARGS:-}
echo "mutmut: $((SECONDS - started)) s"
rules=""
if [[ ${RULES_ARGS:-} != - ]]; then
    # shellcheck disable=SC2086
    rules=$(with_cluster "$BIN/python" "$TOOLS/mutate_rules.py" -j "$JOBS" ${RULES_ARGS:-})
fi
echo
"$BIN/python" "$TOOLS/mutation_summary.py"
if [[ -n $rules ]]; then
    echo
    echo "$rules"
fi
echo
echo "mutation testing: $((SECONDS - started)) s; 'mutmut show NAME' shows a mutant, 'mutmut browse' all of them"
