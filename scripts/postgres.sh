#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for gpupool's tests (DESIGN §8: store tests run on
# SQLite and on a real PostgreSQL server).
#
#   scripts/postgres.sh [DIR] [PORT]   start (or reuse) a server whose cluster lives in DIR
#                                      (default /tmp/gpupool-pg) listening on 127.0.0.1:PORT
#                                      (default 55432); prints its SQLAlchemy URL as the last line
#   scripts/postgres.sh stop [DIR]     stop the server of DIR (nothing to do if none runs)
#
# Idempotent: a server already running in DIR is reused, a stopped cluster in DIR is started,
# an empty or missing DIR gets a fresh cluster. If no server binaries are installed, Debian's
# `postgresql` package is installed (root only). Authentication is `trust`, for 127.0.0.1 only:
# this is a test server, never point it at data you care about.
set -euo pipefail

DB_NAME=gpupool_test

log() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() {
    log "$*"
    exit 1
}

is_root() { [ "$(id -u)" -eq 0 ]; }

# Newest /usr/lib/postgresql/<ver>/bin holding both initdb and pg_ctl. /usr/local/bin wrappers
# are ignored on purpose: they may not be the real programs.
find_bindir() {
    local dir best="" best_ver=-1 ver
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] || continue
        ver=$(basename "$(dirname "$dir")")
        ver=${ver%%.*}
        [[ $ver =~ ^[0-9]+$ ]] || continue
        if [ "$ver" -gt "$best_ver" ]; then
            best_ver=$ver
            best=$dir
        fi
    done
    [ -n "$best" ] && printf '%s\n' "$best"
}

install_postgres() {
    if ! is_root; then
        die "no PostgreSQL server found in /usr/lib/postgresql/*/bin and not running as root, so cannot install it; install Debian's postgresql package (apt-get install postgresql) or set GPUPOOL_TEST_PG_URL"
    fi
    command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL server found and no apt-get to install one"
    log "no PostgreSQL server found; installing Debian's postgresql package"
    apt-get update >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2 || die "apt-get install postgresql failed"
}

# Run a command as the owner of the cluster: `postgres` when we are root (initdb and pg_ctl
# refuse root), ourselves otherwise. cd / first: the caller's directory may be unreadable to it.
as_pg() {
    if is_root; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && "$@")
    fi
}

running() { as_pg "$BIN/pg_ctl" status -D "$DIR" >/dev/null 2>&1; }

# Port of the running server of DIR: line 4 of postmaster.pid.
running_port() { sed -n 4p "$DIR/postmaster.pid" 2>/dev/null || true; }

prepare_dir() {
    mkdir -p "$DIR"
    if is_root; then
        getent passwd postgres >/dev/null || die "no 'postgres' user to own the cluster (the postgresql package creates it)"
        chown postgres:postgres "$DIR"
    fi
    chmod 700 "$DIR"
    as_pg test -w "$DIR" || die "the postgres user cannot write to $DIR (is a parent directory private?); pick a directory under /tmp"
}

init_cluster() {
    log "creating a new cluster in $DIR"
    as_pg "$BIN/initdb" -D "$DIR" -U postgres --encoding=UTF8 --locale=C --auth-host=trust --auth-local=peer \
        --no-sync >"$DIR.initdb.log" 2>&1 || {
        tail -n 20 "$DIR.initdb.log" >&2 || true
        die "initdb failed (log: $DIR.initdb.log)"
    }
    rm -f "$DIR.initdb.log"
    # Trust for TCP from 127.0.0.1 only; the unix socket lives in the 0700 data directory.
    cat >"$DIR/pg_hba.conf" <<'EOF'
# gpupool test server (scripts/postgres.sh): trust on 127.0.0.1 only.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 peer
host    all       all   127.0.0.1/32  trust
EOF
    cat >>"$DIR/postgresql.conf" <<EOF

# --- scripts/postgres.sh (gpupool tests) ---
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
max_connections = 200
# A test server: speed over durability.
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    if is_root; then chown postgres:postgres "$DIR/pg_hba.conf" "$DIR/postgresql.conf"; fi
}

start_server() {
    # The cluster's own port wins over $PORT for an existing cluster.
    local port
    port=$(sed -n "s/^port = \([0-9]*\).*/\1/p" "$DIR/postgresql.conf" | tail -n 1)
    PORT=${port:-$PORT}
    log "starting the server of $DIR on 127.0.0.1:$PORT"
    if ! as_pg "$BIN/pg_ctl" start -w -t 60 -D "$DIR" -l "$DIR/server.log" -o "-p $PORT" >&2; then
        tail -n 20 "$DIR/server.log" >&2 2>/dev/null || true
        die "pg_ctl start failed (is port $PORT taken? log: $DIR/server.log)"
    fi
}

ensure_database() {
    local psql=("$BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1)
    local exists
    exists=$(cd / && "${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'") ||
        die "cannot connect to the server on 127.0.0.1:$PORT as postgres"
    if [ "$exists" != 1 ]; then
        (cd / && "${psql[@]}" -c "CREATE DATABASE $DB_NAME") >&2 || die "cannot create database $DB_NAME"
    fi
}

cmd_stop() {
    DIR=${1:-/tmp/gpupool-pg}
    BIN=$(find_bindir) || die "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: nothing to stop"
    if [ -f "$DIR/PG_VERSION" ] && running; then
        as_pg "$BIN/pg_ctl" stop -w -m fast -D "$DIR" >&2 || die "pg_ctl stop failed for $DIR"
    else
        log "no server running in $DIR"
    fi
}

cmd_start() {
    DIR=${1:-/tmp/gpupool-pg}
    PORT=${2:-55432}
    [[ $PORT =~ ^[0-9]+$ ]] || die "port must be a number, got '$PORT'"
    case "$DIR" in
    /*) ;;
    *) DIR="$PWD/$DIR" ;;
    esac
    BIN=$(find_bindir) || true
    if [ -z "$BIN" ]; then
        install_postgres
        BIN=$(find_bindir) || die "postgresql installed, but still no initdb/pg_ctl in /usr/lib/postgresql/*/bin"
    fi
    if [ -f "$DIR/PG_VERSION" ]; then
        local have want
        have=$(cat "$DIR/PG_VERSION")
        want=$(basename "$(dirname "$BIN")")
        [ "${have%%.*}" = "${want%%.*}" ] ||
            die "$DIR holds a PostgreSQL $have cluster but the server found is $want; remove $DIR or pick another directory"
        if running; then
            PORT=$(running_port)
            [ -n "$PORT" ] || die "cannot read the port of the server running in $DIR"
            log "reusing the server running in $DIR on port $PORT"
        else
            start_server
        fi
    elif [ -d "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
        die "$DIR exists, is not empty and holds no PostgreSQL cluster; remove it or pick another directory"
    else
        prepare_dir
        init_cluster
        start_server
    fi
    ensure_database
    printf 'postgresql+psycopg://postgres@127.0.0.1:%s/%s\n' "$PORT" "$DB_NAME"
}

case "${1:-}" in
stop)
    shift
    cmd_stop "$@"
    ;;
-h | --help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    ;;
*)
    cmd_start "$@"
    ;;
esac
