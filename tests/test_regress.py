"""The pg_regress tests (test/sql/*.sql against test/expected/*.out): pgad as psql shows it, errors included."""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).parent.parent


def test_pg_regress(cluster, tmp_path):
    env = {**os.environ, 'PGHOST': '127.0.0.1', 'PGPORT': str(cluster.settings['port']), 'PGUSER': 'postgres'}
    result = subprocess.run(['make', '--no-print-directory', '-f', 'pgxs.mk', 'installcheck',
                             f'REGRESS_OUT={tmp_path}'], cwd=ROOT, env=env, capture_output=True, text=True)
    diffs = tmp_path / 'regression.diffs'
    assert result.returncode == 0, (diffs.read_text() if diffs.exists() else '') + result.stdout + result.stderr
