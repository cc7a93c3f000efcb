"""The pyproject.toml of a mutation scope of a few files (tools/mutation.sh, MUTATE and MUTATION_TESTS): mutmut's
settings of tools/mutation-models.toml narrowed to those source files, whose mutants run those test files alone.
mutmut's stats run (every test file of the scope, once, before the first mutant) then runs those files alone too.

    python tools/mutation_scope.py 'pgad/models/forecast.py' 'tests/test_forecast.py tests/test_sequences.py'
"""
import json
import sys


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
        ''])


if __name__ == '__main__':
    sys.stdout.write(scope(sys.argv[1].split(), sys.argv[2].split()))
