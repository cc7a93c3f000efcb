"""The README's psql example works when pasted: run its SQL block through psql against a fresh database."""
import json
import pathlib
import re
import subprocess
import uuid

import psycopg
import pytest

README = pathlib.Path(__file__).parent.parent / 'README.md'


def test_readme_psql_example_runs_in_psql(cluster, tmp_path):
    sql = re.search(r'```sql\n(.*?)```', README.read_text(), re.DOTALL).group(1)
    name = 'readme_' + uuid.uuid4().hex[:8]
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    script = tmp_path / 'readme.sql'
    script.write_text(sql)
    result = subprocess.run(['psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p',
                             str(cluster.settings['port']), '-U', 'postgres', '-d', name, '-f', str(script)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert '| iterations' in result.stdout
    # y = 2x + 1 + 0.1·U(0, 1): the fit is a ≈ 2, b ≈ 1.05, and its loss the noise's variance 0.01/12 ≈ 0.00083
    weights, loss, iterations = re.search(r'^ (\{.*\}) \| ([0-9.e-]+) \| +(\d+)$', result.stdout, re.M).groups()
    weights = json.loads(weights)
    assert weights == {'a': pytest.approx(2, abs=0.03), 'b': pytest.approx(1.05, abs=0.02)}
    assert float(loss) == pytest.approx(0.01 / 12, rel=0.2) and iterations == '2000'
