"""The layout of the pgad package: its imports run one way only, and pgad/jit's modules stay small enough to read.

Read from the source with ast (nothing is imported): every module under pgad/, every import in it, those inside
functions too (a lazy import is still a dependency). A circle of imports means a lower module knows a higher one
(jit/codegen ↔ jit/compiler ↔ jit/loops, gpu/compiler ↔ jit/worker were two).
"""
import ast
from pathlib import Path

import pytest

PGAD = Path(__file__).resolve().parent.parent / 'pgad'
MAX_LINES = 700  # a file of pgad/jit: one stage, or one part of the loop kernels (jit/loops/)


def modules():
    """{module name: path} of every module under pgad/ (a package by its __init__.py)."""
    found = {}
    for path in sorted(PGAD.rglob('*.py')):
        parts = path.relative_to(PGAD.parent).with_suffix('').parts
        found['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = path
    return found


def canonical(name):
    """pgad.lang is pgad.lambda under the name Python can spell (pgad/lang.py binds it)."""
    return 'pgad.lambda' + name[len('pgad.lang'):] if name == 'pgad.lang' or name.startswith('pgad.lang.') else name


def imports(name, path, known):
    """The modules of pgad that module `name` imports, anywhere in it."""
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {canonical(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split('.')[:len(package.split('.')) - node.level + 1] if node.level else []
            module = canonical('.'.join(base + ([node.module] if node.module else [])))
            for a in node.names:  # `from . import x`: the submodule x where there is one, else the module's name x
                found.add(f'{module}.{a.name}' if f'{module}.{a.name}' in known else module)
    return {m for m in found if m in known and m != name}


def graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def a_cycle(edges):
    """A list of modules that import each other in a circle, or None."""
    state, stack = {}, []

    def visit(v):
        state[v] = 'open'
        stack.append(v)
        for w in sorted(edges[v]):
            if state.get(w) == 'open':
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        state[v] = 'done'
        stack.pop()
        return None
    for v in sorted(edges):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_imports_run_one_way():
    edges = graph()
    assert 'pgad.jit.compiler' in edges and 'pgad.lambda.rules' in edges['pgad.jit.codegen']  # the graph is read
    cycle = a_cycle(edges)
    assert cycle is None, ' → '.join(cycle)


@pytest.mark.parametrize('edges, circle', [
    ({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': set()}, True), ({'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}, False)])
def test_a_circle_of_imports_is_found(edges, circle):
    assert (a_cycle(edges) is not None) == circle


def test_an_import_inside_a_function_counts(tmp_path):
    path = tmp_path / 'low.py'
    path.write_text('def f():\n    from .high import g\n    return g\n')
    assert imports('pgad.jit.low', path, {'pgad.jit.low', 'pgad.jit.high'}) == {'pgad.jit.high'}


def test_no_file_of_pgad_jit_is_past_max_lines():
    long = {str(p.relative_to(PGAD.parent)): n for p in sorted((PGAD / 'jit').rglob('*.py'))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
