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
MODELS = '## Models: pgad.train, pgad.models, pgad_models, pgad.drop_model'
VECTORS = '## Vectors and matrices'
CLASSES = "## Many classes: loss 'softmax'"
EXPLANATIONS = '## Explanations: <name>_explain, pgad.importance'
TUNING = '## Tuning: pgad.tune'


def section_sql(section=SECTION):
    """The ```sql blocks of a section of docs/sql.md, in order."""
    text = SQL_MD.read_text()
    start = text.index(section)
    end = text.find('\n## ', start + len(section))
    blocks = re.findall(r'^```sql\n(.*?)^```', text[start:end if end != -1 else len(text)], re.DOTALL | re.MULTILINE)
    assert blocks, 'the section has no ```sql block'
    return '\n'.join(blocks)


def run_in_psql(cluster, tmp_path, sql):
    """psql's run of sql in a fresh database with pgad: (returncode, stdout, stderr)."""
    name = new_database(cluster, 'docs_sql')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
        script = tmp_path / 'section.sql'
        script.write_text(sql)
        result = subprocess.run(['psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p',
                                 str(cluster.settings['port']), '-U', 'postgres', '-d', name, '-f', str(script)],
                                capture_output=True, text=True)
    finally:
        if isinstance(cluster, Running):  # a cluster that outlives the session keeps no database of it
            with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE {name} WITH (FORCE)')
    return result


def test_the_aggregates_examples_run_in_psql(cluster, tmp_path):
    result = run_in_psql(cluster, tmp_path, section_sql())
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


def test_the_models_examples_run_in_psql(cluster, tmp_path):
    result = run_in_psql(cluster, tmp_path, section_sql(MODELS))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # the linear model finds price = 100·sqft + 20·rooms + 7 (+ 30 in the north, 0.5·sin(id)); west scores NULL
    weights = json.loads(re.search(r'^ prices +\| (\{.*?\}) ', out, re.M).group(1))
    assert weights['a'] == pytest.approx(100, abs=1) and weights['b'] == pytest.approx(20, abs=1)
    assert re.search(r'^ west +\| *$', out, re.M)
    assert re.search(r'^ north +\| +29[67]\.\d$', out, re.M)  # 100·2 + 20·3 + 7 + 30, to the noise
    assert 'model "robust": iteration 100 of 300' in result.stderr


def output_blocks(section):
    """The ``` blocks (no language) of a section of docs/sql.md: what psql shows for the SQL before each."""
    text = SQL_MD.read_text()
    start = text.index(section)
    end = text.find('\n## ', start + len(section))
    blocks, current, language = [], None, None
    for line in text[start:end].splitlines():
        if line.startswith('```') and current is None:
            current, language = [], line[3:]
        elif line.startswith('```'):
            if language == '':
                blocks.append('\n'.join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_vectors_examples_run_in_psql_as_shown(cluster, tmp_path):
    """The MLP trains and init_weights writes what the section shows, line for line."""
    result = run_in_psql(cluster, tmp_path, section_sql(VECTORS))
    assert result.returncode == 0, result.stderr
    shown = [line.strip() for block in output_blocks(VECTORS) for line in block.splitlines()]
    printed = [line.strip() for line in result.stdout.splitlines()]
    assert [line for line in shown if line not in printed] == []


def test_the_many_classes_examples_run_in_psql_as_shown(cluster, tmp_path):
    """The softmax and two-class logistic models train, and score, as the section shows, line for line."""
    result = run_in_psql(cluster, tmp_path, section_sql(CLASSES))
    assert result.returncode == 0, result.stderr
    shown = [line.strip() for block in output_blocks(CLASSES) for line in block.splitlines()]
    printed = [line.strip() for line in result.stdout.splitlines()]
    assert [line for line in shown if line not in printed] == []


def subsection(heading):
    """(the ```sql blocks, the ``` output blocks) of a ### subsection of docs/sql.md, up to the next heading."""
    text = SQL_MD.read_text()
    start = text.index(f'\n{heading}\n')
    ends = [e for e in (text.find('\n## ', start + 1), text.find('\n### ', start + 1)) if e != -1]
    blocks, current, language = {'sql': [], '': []}, None, None
    for line in text[start:min(ends)].splitlines():
        if line.startswith('```') and current is None:
            current, language = [], line[3:]
        elif line.startswith('```'):
            blocks.setdefault(language, []).append('\n'.join(current))
            current = None
        elif current is not None:
            current.append(line)
    assert blocks['sql'] and blocks[''], f'{heading} has no example'
    return '\n'.join(blocks['sql']), '\n'.join(blocks[''])


def test_the_multiclass_evaluate_and_summary_examples_run_as_shown(cluster, tmp_path):
    """'Evaluating a model''s Many classes, then the summary's Multinomial logistic models on its model."""
    evaluated, evaluated_shown = subsection('### Many classes')
    summarised, summarised_shown = subsection('### Multinomial logistic models')
    result = run_in_psql(cluster, tmp_path, evaluated + '\n' + summarised)
    assert result.returncode == 0, result.stderr
    shown = [line.strip() for line in (evaluated_shown + '\n' + summarised_shown).splitlines()]
    printed = [line.strip() for line in result.stdout.splitlines()]
    assert [line for line in shown if line not in printed] == []
    assert len(shown) > 30


def test_the_explanations_examples_run_in_psql_as_shown(cluster, tmp_path):
    """The explanations, importances and completeness the section shows, line for line."""
    result = run_in_psql(cluster, tmp_path, section_sql(EXPLANATIONS))
    assert result.returncode == 0, result.stderr
    shown = [line.strip() for block in output_blocks(EXPLANATIONS)[1:] for line in block.splitlines()]  # [0]: the
    printed = [line.strip() for line in result.stdout.splitlines()]                                   # signatures
    assert shown and [line for line in shown if line not in printed] == []


def test_the_tuning_examples_run_in_psql_as_shown(cluster, tmp_path):
    """The grid's and the random search's trials, and the version deployed, as the section shows, line for line; a
    NOTICE per trial."""
    result = run_in_psql(cluster, tmp_path, section_sql(TUNING))
    assert result.returncode == 0, result.stderr
    shown = [line.strip() for block in output_blocks(TUNING)[1:] for line in block.splitlines()]  # [0]: the signature
    printed = [line.strip() for line in result.stdout.splitlines()]
    assert shown and [line for line in shown if line not in printed] == []
    assert 'NOTICE:  model "noisy": trial 3 of 4 {"l2": 0.1}: rmse 1.36853, version 3' in result.stderr
    assert len(re.findall(r'NOTICE:  model "noisy": trial \d of [34] ', result.stderr)) == 7
