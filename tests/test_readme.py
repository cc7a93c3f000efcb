"""The README's psql example works when pasted: run its SQL block through psql against a fresh database."""
import pathlib
import re
import subprocess
import uuid

import psycopg

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
    assert '| iterations' in result.stdout and '2000' in result.stdout
