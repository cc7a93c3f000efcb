"""docs/sql.md's examples of the aggregates work when pasted: run the section's SQL through psql against a fresh
database where pgad is installed."""
import json
import pathlib
import re
import subprocess

import psycopg
import pytest

from conftest import Running, new_database

SQL_MD = pathlib.Path(__file__).parent.parent / 'docs' / 'sql.md'
SECTION = '## The aggregates: pgad.loss_agg, pgad.gradient_agg, pgad.gradient_descent_agg'


def section_sql():
    """The ```sql blocks of the aggregates' section of docs/sql.md, in order."""
    text = SQL_MD.read_text()
    start = text.index(SECTION)
    end = text.find('\n## ', start + len(SECTION))
    blocks = re.findall(r'^```sql\n(.*?)^```', text[start:end if end != -1 else len(text)], re.DOTALL | re.MULTILINE)
    assert blocks, 'the section has no ```sql block'
    return '\n'.join(blocks)


def test_the_aggregates_examples_run_in_psql(cluster, tmp_path):
    name = new_database(cluster, 'docs_sql')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
        script = tmp_path / 'aggregates.sql'
        script.write_text(section_sql())
        result = subprocess.run(['psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p',
                                 str(cluster.settings['port']), '-U', 'postgres', '-d', name, '-f', str(script)],
                                capture_output=True, text=True)
    finally:
        if isinstance(cluster, Running):  # a cluster that outlives the session keeps no database of it
            with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE {name} WITH (FORCE)')
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert all(region in out for region in ('north', 'south', 'east', 'west'))
    # the parallel plan: a partial aggregate in the workers, under the Gather
    plan = out[out.index('QUERY PLAN'):]
    assert 'Gather' in plan and 'Partial' in plan and 'Finalize' in plan
    assert plan.index('Gather') < plan.index('Partial')
    # one model per region: y ≈ 2x + 1, 2x + 2, 2x + 3 (plus 0.1·sin), fitted over 3000 iterations
    fits = {region: (json.loads(weights), float(loss)) for region, weights, loss in
            re.findall(r'^ (\w+) +\| (\{.*?\}) +\| +([0-9.e-]+) \| +3000$', out, re.M)}
    assert set(fits) == {'north', 'south', 'east'}
    for region, b in (('north', 1), ('south', 2), ('east', 3)):
        weights, loss = fits[region]
        assert weights == {'a': pytest.approx(2, abs=0.02), 'b': pytest.approx(b, abs=0.03)}
        assert loss < 0.01
    # the outer join's missing rows, and the subquery's rows with NULL, are skipped with the functions' NOTICE
    assert 'skipped 1 of 1 rows with NULL in "x", "y"' in result.stderr
    assert len(re.findall(r'NOTICE:  skipped \d+ of 16 rows with NULL in "x", "y"', result.stderr)) == 3
