"""Re-run a mutation scope's survivors against the tests written for them, one mutant at a time.

    .venv/bin/python tools/mutation_survivors.py SCOPE RULES [DONE] [--untested] [--killed]

SCOPE is a run of tools/mutation.sh with MUTATION_SCOPE=SCOPE (build/mutation-SCOPE/mutants: its mutated copies of
pgad and mutmut's .meta records). RULES is a file of lines `PATTERN|TEST FILES|-k EXPRESSION`: each survivor (exit
code 0 in the records) runs the tests of the first line whose PATTERN it contains (or, for a PATTERN that starts
with '.', ends with), selected by the -k expression, with MUTANT_UNDER_TEST naming it, in the server that imports
the mutants (tools/mutation_server). DONE, if given, is an earlier output whose KILLED mutants are skipped.
--untested: the mutants of the run that mutmut had not tested when it stopped (no exit code), or found no test for
(33: none reached their function in its stats run), are run too.
--killed: mutmut's kills are run again too: its records say 1 for a failed test and for a fixture's error alike, and
its children share one server (tools/mutation.sh), where two tests making a role of one name collide (ERRORED below).
MUTATION_SHARD=k/n (in the environment): the k-th of n shares of the mutants alone (0 ≤ k < n), to run n at once.

It prints a line a survivor: its name, KILLED (a test failed), SURVIVED (they passed), ERRORED (no test failed, a
fixture raised: where shards share one server, as a run of several at once may, two processes running a test that
makes a role of a fixed name collide, so such a verdict is run again alone before it counts), ERROR (pytest's exit
code: no test selected, say) or NORULE, and pytest's last line. mutmut's own records are not changed: what this reports
is a survivor's verdict against tests added after mutmut's stats run. The tests must pass without a mutant first
(MUTANT_UNDER_TEST=none), or every mutant is KILLED.
"""
import glob
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def survivors(scope, untested=False, killed=False):
    found = {}
    for path in glob.glob(str(ROOT / f'build/mutation-{scope}/mutants/**/*.meta'), recursive=True):
        found.update(json.loads(pathlib.Path(path).read_text())['exit_code_by_key'])
    return [name for name, code in found.items()
            if code == 0 or (untested and code in (None, 33)) or (killed and code == 1)]


def verdict(scope, name, files, expression):
    run = ROOT / f'build/mutation-{scope}'
    hits = pathlib.Path('/tmp/pgad-mutation-hits')
    hits.mkdir(mode=0o1777, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / 'tools/mutation_server'), PGAD_MUTATION_DIR=str(run),
               PGAD_MUTATION_HITS=str(hits), MUTANT_UNDER_TEST=name, OMP_NUM_THREADS='1')
    tests = [str(ROOT / f) for f in files.split()]
    done = subprocess.run([str(ROOT / '.venv/bin/python'), '-m', 'pytest', '-x', '-q', '-p', 'no:randomly', *tests,
                           '-k', expression], cwd=run / 'mutants', env=env, capture_output=True, text=True,
                          timeout=900)
    last = (done.stdout.strip().splitlines() or [''])[-1]
    if done.returncode == 1 and ' failed' not in last:  # a fixture's error, no test failed: see ERRORED above
        return 'ERRORED', last
    return {0: 'SURVIVED', 1: 'KILLED'}.get(done.returncode, f'ERROR({done.returncode})'), last


def main(scope, rules, done=None, untested=False, killed=False):
    rules = [line.rstrip('\n').split('|') for line in open(rules) if line.count('|') == 2]
    skip = set()
    if done:
        skip = {line.split()[0] for line in open(done) if ' KILLED ' in line}
    k, n = map(int, os.environ.get('MUTATION_SHARD', '0/1').split('/'))
    for name in survivors(scope, untested, killed)[k::n]:
        short = name.removeprefix('pgad.')  # with its module: two modules of a scope may have a function of a name
        if short in skip:
            continue
        for pattern, files, expression in rules:
            if name.endswith(pattern) if pattern.startswith('.') else pattern in name:
                print(short, *verdict(scope, name, files, expression), flush=True)
                break
        else:
            print(short, 'NORULE', flush=True)


if __name__ == '__main__':
    main(*[a for a in sys.argv[1:] if not a.startswith('--')], untested='--untested' in sys.argv[1:],
         killed='--killed' in sys.argv[1:])
