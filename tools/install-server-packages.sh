#!/usr/bin/env bash
# Installs, from Debian/Ubuntu packages, whatever pgad needs of PostgreSQL and is missing: the server (the version
# pg_config names; 15 on Debian 12 when there is none), PL/Python 3 and the server headers for PGXS.
# Running it again when everything is there changes nothing.
set -euo pipefail
pg_config=${1:-pg_config}
sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
apt_install() {
  [ -n "${updated:-}" ] || { $sudo apt-get update -qq; updated=1; }
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@"
}
if ! command -v "$pg_config" >/dev/null; then
  apt_install postgresql postgresql-common
  pg_config=pg_config
fi
major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
want=()
[ -x "$("$pg_config" --bindir)/postgres" ] || want+=("postgresql-$major")
[ -f "$("$pg_config" --pkglibdir)/plpython3.so" ] || want+=("postgresql-plpython3-$major")
[ -f "$("$pg_config" --includedir-server)/postgres.h" ] || want+=("postgresql-server-dev-$major")
python=$(ldd "$("$pg_config" --pkglibdir)/plpython3.so" 2>/dev/null | grep -o 'libpython3\.[0-9]*' | head -1 | sed 's/^lib//' || true)
if [ -n "$python" ] && ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then want+=("$python-venv"); fi
if [ ${#want[@]} -gt 0 ]; then
  echo "pgad: installing ${want[*]}"
  apt_install "${want[@]}"
fi
python=$(ldd "$("$pg_config" --pkglibdir)/plpython3.so" | grep -o 'libpython3\.[0-9]*' | head -1 | sed 's/^lib//')
"$python" -c 'import ensurepip, venv' 2>/dev/null || apt_install "$python-venv"
