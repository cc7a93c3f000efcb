"""The server side of `make mutation MUTATION_SCOPE=models` (tools/mutation.sh): the PostgreSQL of that run starts with
this folder on PYTHONPATH, so the PL/Python interpreter of each of its backends runs this file as it starts.

With PGAD_MUTATION_DIR set (the run's folder, where mutmut keeps mutants/), a backend imports each module that the
run's [tool.mutmut] only_mutate names from mutants/ (mutmut's copy holding every mutant of it and the trampolines that
pick one) rather than from the installed pgad; the rest of pgad is the installed one, `make install` of the same tree.
The trampolines import mutmut, which the server's Python has not: this folder's mutmut/ stands in for it, and runs the
mutant that the connection's setting mutmut.mutant names (tests/conftest.py sets it from MUTANT_UNDER_TEST).
"""
import fnmatch
import importlib.util
import os
import sys
import tomllib


class Mutants:
    """A finder first on sys.meta_path: a module of pgad that the run mutates, from mutants/."""

    def __init__(self, run):
        with open(os.path.join(run, 'pyproject.toml'), 'rb') as f:
            self.patterns = tomllib.load(f)['tool']['mutmut']['only_mutate']
        self.mutants = os.path.join(run, 'mutants')

    def find_spec(self, name, path=None, target=None):
        if not name.startswith('pgad.'):
            return None
        relative = name.replace('.', '/') + '.py'
        location = os.path.join(self.mutants, relative)
        if not any(fnmatch.fnmatch(relative, p) for p in self.patterns) or not os.path.isfile(location):
            return None
        return importlib.util.spec_from_file_location(name, location)


if os.environ.get('PGAD_MUTATION_DIR'):
    sys.meta_path.insert(0, Mutants(os.environ['PGAD_MUTATION_DIR']))
