"""Compile kernels to PTX for real GPUs, with no GPU: run by tests/test_gpu.py in a process of its own, since the
tests' own process runs numba's CUDA simulator, which compiles nothing.

    python tests/ptx_report.py < jobs.json > report.json

jobs: [{"text", "weights", "mode", "precision", "combine", "cc": [9, 0]}, …], or a kernel's generated source as
{"source", "constants", "types", "cc"} (tests/test_gpu_keyed.py's keyed kernels). For each, the report gives what the
PTX shows (atomic adds in float64, local memory) and what ptxas, from the nvcc wheel numba-cuda brings, says of the
machine code for that target: registers, spill stores and loads. The jobs run on every core.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

os.environ['NUMBA_ENABLE_CUDASIM'] = '0'  # before numba is imported: this process compiles for real targets
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ptxas():
    """The nvcc wheel's ptxas (pgad's cuda extra), or a CUDA toolkit's on the PATH."""
    try:
        import nvidia.cuda_nvcc
        return os.path.join(list(nvidia.cuda_nvcc.__path__)[0], 'bin', 'ptxas')
    except ImportError:
        return shutil.which('ptxas') or '/usr/local/cuda/bin/ptxas'


def report(job):
    from pgad import program
    from pgad.gpu import compiler
    cc = tuple(job['cc'])
    if 'source' in job:
        request = dict(job='ptx', source=job['source'], constants=job['constants'], precision='float64',
                       cc=list(cc), types=job['types'])
    else:
        prog = program.build(job['text'], tuple(job['weights']), job['mode'])
        request = compiler.ptx_request(prog, cc, job['precision'], job['combine'])
    ptx, _ = compiler.ptx_here(request)  # in this process
    with tempfile.NamedTemporaryFile('w', suffix='.ptx') as f:
        f.write(ptx)
        f.flush()
        run = subprocess.run([ptxas(), f'-arch=sm_{cc[0]}{cc[1]}', '-v', f.name, '-o', os.devnull],
                             capture_output=True, text=True)
    numbers = lambda pattern: [int(n) for n in re.findall(pattern, run.stderr)]  # noqa: E731
    return dict(job, target=re.search(r'^\.target (\S+)', ptx, re.MULTILINE).group(1),
                f64_atomics=len(re.findall(r'\b(?:atom|red)\.global\.add\.f64\b', ptx)),
                atomics=len(re.findall(r'\b(?:atom|red)\.', ptx)),
                local=len(re.findall(r'\b(?:ld|st)\.local\b', ptx)),
                ptxas=run.returncode, ptxas_errors=run.stderr if run.returncode else '',
                spill_stores=sum(numbers(r'(\d+) bytes spill stores')),
                spill_loads=sum(numbers(r'(\d+) bytes spill loads')),
                registers=max(numbers(r'Used (\d+) registers') or [0]))


if __name__ == '__main__':
    jobs = json.load(sys.stdin)
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        json.dump(list(pool.map(report, jobs)), sys.stdout)
