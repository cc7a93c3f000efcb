"""Mutation testing of the rules tables, which mutmut cannot reach: mutmut mutates only inside functions, and the rows
of pgad/lambda/rules.py (`primitive(...)` calls at module level, whose lambdas are the partial derivatives) and the
entries of pgad/jit/codegen.py's EMIT dict are module-level code.

For each row it breaks one thing at a time, in process, by replacing the table entry (as tests/test_rules.py's
test_a_wrong_rule_fails_the_checks does), and runs the in-process tests ([tool.mutmut]
pytest_add_cli_args_test_selection in pyproject.toml) in a forked process, stopping at the first failure:
- evaluate: swapped for the next row's of the same signature (sin → cos, lt → le, …), or, where no other row has
  that signature, its result scaled by 1.5 (numbers) or negated (booleans);
- each argument's partial derivative: scaled by 1.5, shifted by 0.25, negated;
- EMIT: swapped like evaluate, and its result scaled by 1.5 (numbers) or negated (booleans).
A mutation is killed when a test fails, survived when they all pass.

    .venv/bin/python tools/mutate_rules.py [-j JOBS] [NAME ...]      (NAME: primitives to mutate; all by default)
"""
import argparse
import os
import signal
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 600


def selection():
    with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
        return tomllib.load(f)['tool']['mutmut']['pytest_add_cli_args_test_selection']


def mutations(names):
    """[(name, what, apply)]: apply() breaks one entry of the tables (in the process that calls it)."""
    from llvmlite import ir
    from pgad.jit import codegen
    from pgad.lang import rules

    table, emit = rules.PRIMITIVES, codegen.EMIT
    by_signature = {}
    for p in table.values():
        by_signature.setdefault((p.args, p.result), []).append(p.name)

    def peer(p):
        same = by_signature[(p.args, p.result)]
        return same[(same.index(p.name) + 1) % len(same)] if len(same) > 1 else None

    def set_row(name, **fields):
        table[name] = table[name]._replace(**fields)

    def set_emit(name, fn):
        emit[name] = fn

    def partial_of(p, k, change):
        def partials(*args):
            result = p.partials(*args)
            parts = list(result) if isinstance(result, tuple) else [result]
            parts[k] = change(parts[k])
            return tuple(parts) if isinstance(result, tuple) else parts[0]
        return partials

    def scaled_emit(fn, boolean):
        if boolean:
            return lambda e, *a: e.b.not_(fn(e, *a))
        return lambda e, *a: e.b.fmul(fn(e, *a), ir.Constant(ir.DoubleType(), 1.5))

    found = []
    for p in table.values():
        if names and p.name not in names:
            continue
        boolean = p.result == 'b'
        other = peer(p)
        if other:
            found.append((p.name, f'evaluate swapped for {other}\'s',
                          lambda p=p, other=other: set_row(p.name, evaluate=table[other].evaluate)))
        else:
            evaluate = (lambda f: lambda *a: ~f(*a)) if boolean else (lambda f: lambda *a: f(*a) * 1.5)
            found.append((p.name, 'evaluate negated' if boolean else 'evaluate scaled by 1.5',
                          lambda p=p, evaluate=evaluate: set_row(p.name, evaluate=evaluate(p.evaluate))))
        for k, arg in enumerate(p.args):
            if arg != 'n' or p.result != 'n' or _partial_is_none(p, k):
                continue
            for what, change in (('scaled by 1.5', lambda d: d * 1.5), ('shifted by 0.25', lambda d: d + 0.25),
                                 ('negated', lambda d: -d)):
                found.append((p.name, f'∂/∂arg{k + 1} {what}',
                              lambda p=p, k=k, change=change: set_row(p.name, partials=partial_of(p, k, change))))
        if other:
            found.append((p.name, f'EMIT swapped for {other}\'s', lambda p=p, other=other: set_emit(p.name, emit[other])))
        found.append((p.name, 'EMIT negated' if boolean else 'EMIT scaled by 1.5',
                      lambda p=p: set_emit(p.name, scaled_emit(emit[p.name], boolean))))
    return found


def _partial_is_none(p, k):
    """Is p's partial derivative with respect to argument k None (no derivative)? Asked of the rule on a scratch graph."""
    from pgad.lang import dag
    graph = dag.Graph()
    args = [graph.column(f'c{i}') if kind == 'n' else graph.column(f'c{i}') > 0 for i, kind in enumerate(p.args)]
    result = p.partials(*args, graph.apply(p.name, *args))
    return (result if isinstance(result, tuple) else (result,))[k] is None


def run(apply, tests):
    """Fork a process that applies the mutation and runs the tests: the pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 3
    try:
        import pytest
        signal.alarm(TIMEOUT_S)
        apply()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        code = int(pytest.main(['--rootdir', ROOT, '-x', '-q', '-p', 'no:cacheprovider', '-p', 'no:randomly', *tests]))
    finally:
        os._exit(code)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('-j', '--jobs', type=int, default=os.cpu_count())
    parser.add_argument('names', nargs='*', help='primitives to mutate (all by default)')
    options = parser.parse_args()
    os.chdir(ROOT)
    import numpy, autograd, pytest  # noqa: F401, E401  (imported once, before the forks)
    import pgad.lang  # noqa: F401  (binds pgad.lang; nothing compiled or cached before the forks)
    todo, tests = mutations(set(options.names)), selection()
    started, running, results = time.monotonic(), {}, {}
    pending = list(enumerate(todo))
    while pending or running:
        while pending and len(running) < options.jobs:
            k, (name, what, apply) = pending.pop(0)
            running[run(apply, tests)] = k
        pid, status = os.wait()
        if pid in running:
            code = os.waitstatus_to_exitcode(status)
            results[running.pop(pid)] = {0: 'survived', 1: 'killed', -signal.SIGALRM: 'timeout'}.get(
                code, f'killed (pytest exit {code})')
    width = max(len(name) for name, _, _ in todo)
    for k, (name, what, _) in enumerate(todo):
        print(f'{results[k]:<10} {name:<{width}}  {what}')
    counts = {}
    for verdict in results.values():
        counts[verdict.split()[0]] = counts.get(verdict.split()[0], 0) + 1
    print(f'\nrules and EMIT: {len(todo)} mutations, ' + ', '.join(f'{n} {v}' for v, n in sorted(counts.items())) +
          f' ({time.monotonic() - started:.0f} s)')


if __name__ == '__main__':
    main()
