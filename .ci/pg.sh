# shellcheck shell=bash
# Source this, then `pg_start`: a throwaway PostgreSQL cluster in a temporary directory, owned
# and run by an unprivileged user, listening on a free loopback port. Exports VAK_TEST_PG_URL and
# stops the cluster (and removes its directory) when the sourcing shell exits.

pg_start() {
  if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    echo "installing Debian's postgresql package" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  PG_BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  local run_as=()
  PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/vak-pg.XXXXXX")"
  if [ "$(id -u)" = 0 ]; then
    # initdb refuses to run as root; a system user with no shell and no home owns the cluster.
    id vakpg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin vakpg
    chown vakpg "$PG_DIR"
    run_as=(runuser -u vakpg --)
  fi
  "${run_as[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U vak --auth=trust -E UTF8 --no-sync >"$PG_DIR/initdb.log"
  trap pg_stop EXIT
  # A random high loopback port; another one if it is taken.
  local attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    PG_PORT="$(shuf -i 20000-60999 -n 1)"
    if "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=200" start >/dev/null; then
      break
    fi
    if [ "$attempt" = 8 ]; then
      cat "$PG_DIR/server.log" >&2
      return 1
    fi
  done
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U vak vak_test
  export VAK_TEST_PG_URL="postgres://vak@127.0.0.1:$PG_PORT/vak_test"
  PG_RUN_AS=("${run_as[@]}")
  echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') at $VAK_TEST_PG_URL" >&2
}

pg_stop() {
  if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR/data" ]; then
    "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
  fi
}
