#!/usr/bin/env bash
# A second PostgreSQL installation with an older pgad in it, for the benchmarks that time the pgad of this tree
# against another version's in one session (bench/optimum.py --baseline PREFIX):
#
#     bash tools/baseline.sh [COMMIT] [PREFIX]      (as root; defaults: fa02f1d, 0.13.0, and /opt/pg-bench-old)
#
# It copies the PostgreSQL that $PG_CONFIG (else pg_config on PATH) names to PREFIX, keeping the Debian layout
# (PREFIX/usr/lib/postgresql/V and PREFIX/usr/share/postgresql/V; PostgreSQL finds its files relative to its
# binaries, so the copy runs from there), copies the server's Python environment ($PGAD_HOME/venv, else
# /usr/local/lib/pgad/venv, with its packages, so nothing is downloaded), takes COMMIT's files from this repository
# (git archive, into PREFIX/src) and runs `make install` there with PG_CONFIG, PGAD_HOME and PGAD_CACHE under PREFIX.
# The installation this tree's `make install` uses is not touched. Under a minute and 900 MB; running it again
# rebuilds PREFIX/src and reinstalls pgad, and keeps the copies. `rm -rf PREFIX` removes it all.
set -euo pipefail
commit=${1:-fa02f1d}
prefix=${2:-/opt/pg-bench-old}
repo=$(cd "$(dirname "$0")/.." && pwd)
pg_config=${PG_CONFIG:-$(command -v pg_config)}
venv=${PGAD_HOME:-/usr/local/lib/pgad}/venv
major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
bindir=$("$pg_config" --bindir)
sharedir=$("$pg_config" --sharedir)
includedir=$("$pg_config" --includedir)
case "$bindir" in
  */lib/postgresql/$major/bin) ;;
  *) echo "baseline.sh: $bindir is not the Debian layout (…/lib/postgresql/$major/bin)" >&2; exit 1 ;;
esac

mkdir -p "$prefix/usr/lib/postgresql" "$prefix/usr/share/postgresql" "$prefix/usr/include" "$prefix/pgad" \
    "$prefix/cache"
[ -d "$prefix/usr/lib/postgresql/$major" ] || cp -a "$(dirname "$bindir")" "$prefix/usr/lib/postgresql/$major"
[ -d "$prefix/usr/share/postgresql/$major" ] || cp -a "$sharedir" "$prefix/usr/share/postgresql/$major"
[ -e "$prefix/usr/include/postgresql" ] || ln -s "$includedir" "$prefix/usr/include/postgresql"
[ -d "$prefix/pgad/venv" ] || cp -a "$venv" "$prefix/pgad/venv"
chown postgres:postgres "$prefix/cache" 2>/dev/null || true
chmod 700 "$prefix/cache"

rm -rf "$prefix/src"
mkdir -p "$prefix/src"
git -C "$repo" archive "$commit" | tar -x -C "$prefix/src"
git -C "$repo" rev-parse "$commit" > "$prefix/src/COMMIT"
make -C "$prefix/src" install PG_CONFIG="$prefix/usr/lib/postgresql/$major/bin/pg_config" \
    PGAD_HOME="$prefix/pgad" PGAD_CACHE="$prefix/cache" > "$prefix/install.log" 2>&1 ||
    { tail -20 "$prefix/install.log" >&2; exit 1; }
version=$(sed -nE "s/^default_version = '(.*)'/\1/p" "$prefix/src/extension/pgad.control")
echo "pgad $version ($(cut -c1-12 "$prefix/src/COMMIT")) installed under $prefix: bench/optimum.py --baseline $prefix"
