"""Every SQL example in README.md and docs/*.md runs as written, and shows what psql prints.

Each page runs in a database of its own, its ```sql blocks in the order the page gives them, in one psql session
(ON_ERROR_STOP: an example that fails fails the page). A block the page shows right after an example, in a plain
``` fence with no heading between, is that example's output: it must appear in what psql printed for it, line for
line, up to the alignment of psql's columns and to numbers within a relative 1e-6 (another CPU sums in another
order). A block that cannot run on a test machine says why on the line above its fence,
`<!-- not run: needs a GPU -->`, and is left out; a new page is covered as soon as it has an example. A ```text
block of `=> statement` lines is a psql session: each statement runs after the page's examples, and prints exactly
the lines under it (an ERROR with psql's LINE, caret, HINT and QUERY lines).
"""
import math
import pathlib
import re
import shlex
import subprocess
from dataclasses import dataclass

import psycopg
import pytest

from conftest import new_database

ROOT = pathlib.Path(__file__).parent.parent
PAGES = [ROOT / 'README.md'] + sorted((ROOT / 'docs').glob('*.md'))
FENCE = re.compile(r'^```(\w*)\n(.*?)^```', re.DOTALL | re.MULTILINE)
NOT_RUN = re.compile(r'<!-- not run: (.+?) -->\s*$')
MARK = '@@ example {} @@'
NUMBER = re.compile(r'-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?')


@dataclass
class Example:
    line: int           # where its fence opens in the page
    sql: str
    output: str = None  # what the page shows it prints, if it shows anything
    not_run: str = None  # why it is left out, if it is


def examples(page):
    """The page's SQL examples, in order, with the output it shows for each."""
    text = page.read_text()
    found, previous = [], None
    for fence in FENCE.finditer(text):
        language, body = fence.groups()
        line = text.count('\n', 0, fence.start()) + 1
        between = text[previous.end():fence.start()] if previous else ''
        if language == 'sql':
            before = text[:fence.start()].rstrip('\n').rsplit('\n', 1)[-1]
            reason = NOT_RUN.search(before)
            found.append(Example(line, body, not_run=reason and reason.group(1)))
        elif (language == '' and found and previous is not None and previous.group(1) == 'sql'
              and not re.search(r'^#', between, re.MULTILINE)):
            found[-1].output = body
        previous = fence
    return found


def cells(line):
    """A line of psql's output as what it says: cells stripped of alignment, a rule as '-'."""
    if re.fullmatch(r'[-+]+', line.strip()):
        return ('-',)
    return tuple(cell.strip() for cell in line.strip().split('|'))


def same(shown, printed):
    """Do two lines say the same, numbers within a relative 1e-6?"""
    a, b = cells(shown), cells(printed)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if NUMBER.sub('#', x) != NUMBER.sub('#', y):
            return False
        if not all(math.isclose(float(p), float(q), rel_tol=1e-6, abs_tol=1e-12)
                   for p, q in zip(NUMBER.findall(x), NUMBER.findall(y))):
            return False
    return True


def shown_in(shown, printed):
    """Are the shown lines a run of the printed ones?"""
    want = [line for line in shown.splitlines() if line.strip()]
    have = [line for line in printed.splitlines() if line.strip()]
    return any(all(same(w, h) for w, h in zip(want, have[k:k + len(want)]))
               for k in range(len(have) - len(want) + 1))


def sessions(page):
    """The psql sessions the page shows, ```text blocks of `=> statement` lines each followed by what psql prints:
    [(line, statement, printed)]."""
    text, found = page.read_text(), []
    for fence in FENCE.finditer(text):
        if fence.group(1) != 'text' or not fence.group(2).startswith('=> '):
            continue
        line = text.count('\n', 0, fence.start()) + 1
        for part in fence.group(2).split('=> ')[1:]:
            statement, _, printed = part.partition('\n')
            found.append((line, statement, printed))
    return found


def psql(cluster, name, *arguments):
    return subprocess.run(['psql', '-X', '-h', '127.0.0.1', '-p', str(cluster.settings['port']), '-U', 'postgres',
                           '-d', name, *arguments], capture_output=True, text=True, timeout=600)


def run_page(cluster, tmp_path, page, runnable):
    """psql's output for each runnable example of the page, run in order in a new database, and for each statement
    of its sessions (after the examples)."""
    name = new_database(cluster, 'docs')
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
        roles = {r for r, in admin.execute('SELECT rolname FROM pg_catalog.pg_roles')}
    script = tmp_path / f'{page.stem}.sql'
    script.write_text(''.join(f'\\echo {MARK.format(k)}\n{e.sql}\n' for k, e in enumerate(runnable)))
    try:
        result = psql(cluster, name, '-v', 'ON_ERROR_STOP=1', '-f', str(script))
        said = [psql(cluster, name, '-c', statement) for _, statement, _ in sessions(page)]
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')
            for role, in admin.execute('SELECT rolname FROM pg_catalog.pg_roles').fetchall():
                if role not in roles:  # a page's roles (ALTER ROLE … SET): a cluster's, not the database's
                    admin.execute(f'DROP ROLE "{role}"')
    parts = re.split(r'^@@ example (\d+) @@\n', result.stdout, flags=re.MULTILINE)
    printed = {int(k): out for k, out in zip(parts[1::2], parts[2::2])}
    return result, printed, [r.stdout + r.stderr for r in said]


@pytest.mark.parametrize('page', [p for p in PAGES if examples(p) or sessions(p)], ids=lambda p: p.name)
def test_every_example_runs_as_written_and_prints_what_the_page_shows(cluster, tmp_path, page):
    found = examples(page)
    runnable = [e for e in found if not e.not_run]
    result, printed, said = run_page(cluster, tmp_path, page, runnable)
    failed = max(printed, default=0)
    assert result.returncode == 0, (f'{page.name}: the example at line {runnable[failed].line} failed:\n'
                                    f'{result.stderr}')
    for k, example in enumerate(runnable):
        if example.output is not None:
            assert shown_in(example.output, printed[k]), (
                f'{page.name}, line {example.line}: the page shows\n{example.output}\npsql printed\n{printed[k]}')
    for (line, statement, shown), got in zip(sessions(page), said):  # a session's lines exactly, errors included
        assert got.rstrip() == shown.rstrip(), f'{page.name}, line {line}: {statement}\nprinted\n{got}'


def test_a_shown_output_is_compared_up_to_alignment_and_rounding():
    printed = ' a | b\n---+------\n 1 | 2.0000000000001\n(1 row)\n'
    assert shown_in('  a  |  b\n-----+-----\n  1  |  2', printed)
    assert not shown_in(' a | b\n---+---\n 1 | 3', printed)
    assert not shown_in(' a | c', printed)
    assert not shown_in(' a | b\n 1 | 2', printed)  # the rule is a line of its own


def test_examples_find_outputs_and_reasons(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text('```sql\nSELECT 1;\n```\n\nprints\n\n```\n 1\n```\n\n<!-- not run: needs a GPU -->\n'
                    '```sql\nSELECT 2;\n```\n\n## Next\n\n```\nnot an output\n```\n```python\nx\n```\n')
    first, second = examples(page)
    assert (first.sql, first.output, first.not_run) == ('SELECT 1;\n', ' 1\n', None)
    assert (second.sql, second.output, second.not_run) == ('SELECT 2;\n', None, 'needs a GPU')


def test_the_make_commands_the_pages_give_exist():
    """`make demo`, `make install .venv/.done`, … in README.md, bench/README.md and docs/*.md: targets the Makefile
    has (a dry run, `make -n`, knows them)."""
    commands = set()
    for page in PAGES + [ROOT / 'bench' / 'README.md']:
        text = page.read_text()
        shell = '\n'.join(body for language, body in FENCE.findall(text) if language in ('sh', 'shell', 'bash'))
        for targets in re.findall(r'`make ([^`]*)`', text) + re.findall(r'^make ([^#\n]*)', shell, re.MULTILINE):
            commands.add(tuple(t for t in shlex.split(targets) if '=' not in t))
    assert ('install', '.venv/.done') in commands and ('demo',) in commands
    for targets in commands:
        result = subprocess.run(['make', '-n', *targets], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, f'make {" ".join(targets)}: {result.stderr}'


def test_the_volatility_docs_sql_states_is_each_functions(cluster):
    """docs/sql.md's table of volatilities, function by function, against pg_proc on a server with pgad."""
    text = (ROOT / 'docs' / 'sql.md').read_text()
    table = text[text.index('| function | volatility |'):]
    stated = {}
    for row in table.split('\n\n')[0].splitlines()[2:]:
        names, volatility = row.split('|')[1:3]
        word = re.search(r'`(STABLE|IMMUTABLE|VOLATILE)`', volatility)
        for name in re.findall(r'`pgad\.(\w+)`', names):
            stated[name] = word and word.group(1)
    name = new_database(cluster, 'volatility')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            actual = dict(db.execute(
                "SELECT p.proname, CASE p.provolatile WHEN 's' THEN 'STABLE' WHEN 'i' THEN 'IMMUTABLE' ELSE 'VOLATILE' "
                "END FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pgad'::regnamespace AND p.prokind = 'f' "
                "AND p.proname !~ '^_'").fetchall())
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')
    assert set(actual) <= set(stated), f'functions the table leaves out: {set(actual) - set(stated)}'
    assert {f: stated[f] for f in actual} == actual
