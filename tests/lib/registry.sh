# Sourced by the test scripts that need an OCI registry: `start_registry DIR` starts Debian's
# docker-registry (the distribution v2 server) on a free loopback port with its configuration,
# storage and log in DIR, sets registry_port and registry_pid, and returns once it answers
# /v2/ (1, with its log on stderr, when it does not). `scratch_dir` sets work to a new temporary
# directory for it, which is removed, the registry stopped first, when the script exits.
scratch_dir() {
  work=$(mktemp -d)
  registry_pid=
  trap _scratch_cleanup EXIT
}

_scratch_cleanup() {
  # The registry ends by the SIGTERM sent here: its status (143) is not the script's.
  if [[ -n "$registry_pid" ]]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}

start_registry() {
  local dir=$1
  registry_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$dir/registry.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $dir/registry-data}
http:
  addr: 127.0.0.1:$registry_port
YAML
  docker-registry serve "$dir/registry.yml" >"$dir/registry.log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$registry_port/v2/" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  cat "$dir/registry.log" >&2
  return 1
}
