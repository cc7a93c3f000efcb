"""pgad.explain, against a real server."""
import pytest

from conftest import error_of

STAGES = ['parse', 'differentiate', 'backend', 'IR generation', 'optimisation', 'machine code']


@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_explain_shows_every_stage_with_its_time(db, mode):
    rows = db.execute("SELECT stage, detail, ms FROM pgad.explain('λ(d, w) (w.a*d.x + w.b - d.y)^2', %s)",
                      (mode,)).fetchall()
    assert [stage for stage, _, _ in rows] == STAGES
    assert all(ms >= 0 for _, _, ms in rows)
    details = dict((stage, detail) for stage, detail, _ in rows)
    assert f'{mode} mode' in details['differentiate'] and '∂/∂a = ' in details['differentiate']
    assert 'define void @"pgad_kernel"' in details['IR generation']
    assert 'IR instructions after O3' in details['optimisation']
    assert 'machine instructions' in details['machine code']
    assert details['backend'].startswith('llvm: auto, for rows not given;')


def test_explain_rejects_bad_input(db):
    assert error_of(db, "SELECT * FROM pgad.explain('λ(d, w) w.a +')").sqlstate == '42601'
    assert error_of(db, "SELECT * FROM pgad.explain('λ(d, w) w.a', 'sideways')").sqlstate == '22023'


def test_llvm_and_python_backends_agree_from_sql(db):
    args = ('λ(d, w) softplus(w.a*d.x + w.b) - d.x*(w.a*d.x + w.b)',
            'SELECT x / 100.0 AS x FROM generate_series(1, 1000) AS x', '{"a": 0.3, "b": -0.2}')
    for mode in ('forward', 'reverse'):
        llvm = db.execute("SELECT pgad.gradient(%s, %s, %s, %s, 'llvm')", (*args, mode)).fetchone()[0]
        python = db.execute("SELECT pgad.gradient(%s, %s, %s, %s, 'python')", (*args, mode)).fetchone()[0]
        assert llvm == pytest.approx(python, rel=1e-12)
