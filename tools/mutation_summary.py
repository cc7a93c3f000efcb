"""The results of the last `make mutation` (mutmut's, in mutants/): the count of each verdict per file, the score, and
the mutants that were not killed, grouped by file; with --diffs, as markdown with each survivor's diff.

    .venv/bin/python tools/mutation_summary.py [--diffs]      (from the repository root)
"""
import argparse
from collections import Counter

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files

COLUMNS = ('killed', 'survived', 'timeout', 'segfault', 'suspicious', 'check was interrupted by user', 'no tests',
           'not checked')
HEADINGS = ('killed', 'survived', 'timeout', 'segfault', 'suspicious', 'interrupted', 'no tests', 'not checked')
# What a test process did that counts as the mutant detected: a failing test, a hang, a crash (LLVM given broken IR).
# mutmut's 'check was interrupted by user' is pytest's exit code 2, which a collection error (a mutant that breaks an
# import) gives too.
DETECTED = ('killed', 'timeout', 'segfault', 'check was interrupted by user')


def load():
    """{path: {mutant name: status}}, for every file mutmut mutated."""
    found = {}
    for path in sorted(walk_mutatable_files()):
        data = SourceFileMutationData(path=path)
        data.load()
        found[str(path)] = {name: status_by_exit_code[code] for name, code in data.exit_code_by_key.items()}
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--diffs', action='store_true', help='markdown, with the diff of every mutant not killed')
    diffs = parser.parse_args().diffs
    results = load()
    total = Counter()
    rows = [('file', 'mutants', *HEADINGS)]
    for path, statuses in results.items():
        counts = Counter(statuses.values())
        total.update(counts)
        rows.append((path, sum(counts.values()), *(counts[c] for c in COLUMNS)))
    rows.append(('total', sum(total.values()), *(total[c] for c in COLUMNS)))
    tested = sum(total.values()) - total['no tests'] - total['not checked'] - total['skipped']
    score = sum(total[d] for d in DETECTED) / tested if tested else 0.0
    if diffs:
        print('| ' + ' | '.join(map(str, rows[0])) + ' |')
        print('|' + '---|' * len(rows[0]))
        for row in rows[1:]:
            print('| ' + ' | '.join(map(str, row)) + ' |')
    else:
        for row in rows:
            print(f'{row[0]:<24}' + ''.join(f'{c:>12}' for c in row[1:]))
    print(f'\nscore: {score:.1%} of the {tested} mutants that some test runs detected (killed, timed out, crashed)')
    for path, statuses in results.items():
        alive = [(name, status) for name, status in statuses.items() if status not in DETECTED]
        if not alive:
            continue
        print(f'\n## {path}: {len(alive)} not detected\n' if diffs else f'\n{path}:')
        for name, status in sorted(alive, key=lambda a: (a[1], _order(a[0]))):
            if diffs:
                print(f'### {name}: {status}\n\n```diff\n{get_diff_for_mutant(name, path=path).strip()}\n```\n')
            else:
                print(f'    {status:<12} {name}')


def _order(name):
    """Mutant names in the order of their functions and numbers (x_f__mutmut_2 before x_f__mutmut_10)."""
    function, _, number = name.rpartition('__mutmut_')
    return function, int(number) if number.isdigit() else 0


if __name__ == '__main__':
    main()
