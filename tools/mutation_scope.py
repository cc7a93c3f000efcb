"""The pyproject.toml of a mutation scope of a few files (tools/mutation.sh, MUTATE and MUTATION_TESTS): mutmut's
settings of tools/mutation-models.toml narrowed to those source files, whose mutants run those test files alone.
mutmut's stats run (every test file of the scope, once, before the first mutant) then runs those files alone too.

    python tools/mutation_scope.py 'pgad/models/forecast.py' 'tests/test_forecast.py tests/test_sequences.py'
"""
import json
import sys

# As pyproject.toml's [tool.mutmut] and tools/mutation-models.toml: each mutant's tests in a process forked from a
# fork server that has imported no pgad (tools/mutation.sh links tools/ into the run's directory). Forked from
# mutmut's own process instead, which ran the stats run, a mutant's tests found the kernels that run compiled
# (compiler._loaded) and never generated the mutant's code: every mutant of jit/lanes.py's IR survived.
ISOLATION = ['process_isolation = "forkserver"', 'forkserver_warmup = "import"',
             'preload_modules_file = "tools/mutation-preload.txt"',
             # a mutant that loops for ever (in machine code, a loop's bound mutated) counts as timed out after 6 ×
             # (its tests' time + 3 s) of wall clock, not mutmut's 15 × (8 minutes a mutant for jit/scan.py's tests)
             'timeout_multiplier = 6.0']


def scope(sources, tests):
    """The toml text: each source's module runs every test file given."""
    modules = [s.removesuffix('.py').replace('/', '.') for s in sources]
    listed = json.dumps(tests)  # a JSON list of plain strings is a TOML array
    return '\n'.join([
        '# Written by tools/mutation_scope.py for tools/mutation.sh; docs/testing.md, "Mutation testing that sees the',
        '# server", says how the run uses it.',
        '[tool.pytest.ini_options]',
        'testpaths = ["tests"]',
        'addopts = "-ra"',
        '',
        '[tool.pgad.mutation.tests]',
        *(f'"{m}" = {listed}' for m in modules),
        '',
        '[tool.mutmut]',
        'source_paths = ["pgad"]',
        f'only_mutate = {json.dumps(sources)}',
        'timeout_constant = 3.0',
        f'pytest_add_cli_args_test_selection = {listed}',
        *ISOLATION,
        ''])


if __name__ == '__main__':
    sys.stdout.write(scope(sys.argv[1].split(), sys.argv[2].split()))
