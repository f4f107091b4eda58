# Sourced by the test scripts: a real OCI registry (Debian's docker-registry), anonymous, on a
# loopback port. `start_registry DIR PORT` starts it with its storage in DIR and sets
# REGISTRY_PID; `wait_registry PORT` waits until it answers (two minutes at most: a bound on a
# hang, not a speed check).
start_registry() {
  cat >"$1/registry.yml" <<YAML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $1/registry}}
http: {addr: 127.0.0.1:$2}
YAML
  docker-registry serve "$1/registry.yml" >"$1/registry.log" 2>&1 &
  REGISTRY_PID=$!
}
wait_registry() {
  for _ in $(seq 1 1200); do
    curl -sf "http://127.0.0.1:$1/v2/" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}
