# Shell functions for finding PostgreSQL's server binaries; sourced by scripts/test and
# scripts/postgres-server.

# Prints the directory holding initdb, postgres, pg_ctl and pg_isready: $AUTOSHARD_PG_BIN,
# pg_config's, the newest /usr/lib/postgresql/<version>/bin (Debian), or initdb's on PATH.
pg_bin() {
  local dir
  for dir in "${AUTOSHARD_PG_BIN:-}" "$(pg_config --bindir 2>/dev/null || true)" \
    $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) $(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/x)"); do
    if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && [ -x "$dir/pg_isready" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}
