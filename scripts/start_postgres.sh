#!/usr/bin/env bash
# Start a local PostgreSQL server (Debian's package) for the shared hyperparameter search and its tests:
#
#     eval "$(scripts/start_postgres.sh)"
#
# exports LMSTUDY_TEST_POSTGRES=postgresql://lmstudy:lmstudy@127.0.0.1:PORT/postgres.
#
# Installs the `postgresql` package when it is missing (apt-get; as root, else through sudo), creates the
# default cluster if there is none, starts it (it listens on 127.0.0.1 only), and creates the role `lmstudy`
# (password `lmstudy`, allowed to create databases: tests/test_hpsearch_postgres.py makes a fresh database
# per test). Idempotent: a running server and an existing role are kept. Prints one `export` line on stdout;
# everything else goes to stderr. Any failure exits non-zero (CI must not skip the PostgreSQL tests silently).
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "installing postgresql (apt-get)" >&2
    $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >&2
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$version main"; then
    $sudo pg_createcluster "$version" main >&2
fi
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}' | grep -qx online; then
    $sudo pg_ctlcluster "$version" main start >&2
fi
port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi
}
if [ "$(as_postgres psql -p "$port" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'lmstudy'")" != "1" ]; then
    as_postgres psql -p "$port" -qc "CREATE ROLE lmstudy LOGIN CREATEDB PASSWORD 'lmstudy'" >&2
fi
echo "export LMSTUDY_TEST_POSTGRES=postgresql://lmstudy:lmstudy@127.0.0.1:$port/postgres"
