"""pgad.lang: the lambda language, pgad/lambda/, under a name Python can spell (`lambda` is a keyword).

Importing pgad.lang imports pgad.lambda, every stage with it, and puts that very package in this module's place in
sys.modules, each stage under both names: pgad.lang.rules is the module pgad.lambda.rules, never a second copy.
Bound here, when something first imports pgad.lang, rather than in pgad/__init__.py: the compiler process
(`python -m pgad.jit.worker`) imports the pgad package and needs neither the language nor numpy (docs/performance.md,
"The first call").
"""
import importlib
import sys

_package = __name__.rpartition('.')[0]
_module = importlib.import_module(_package + '.lambda')
for _name, _stage in list(sys.modules.items()):
    if _name == _package + '.lambda' or _name.startswith(_package + '.lambda.'):
        sys.modules[_name.replace('.lambda', '.lang', 1)] = _stage
