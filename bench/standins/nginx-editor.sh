#!/usr/bin/env bash
# Benchmark stand-in for JupyterLab (SANDBOX_EDITORS__JUPYTERLAB): nginx serving static files under
# the session's base path, so the proxy benchmark measures the full product path (auth, route,
# proxy) in front of a fast, well-known upstream.
# Takes the arguments the server gives JupyterLab and uses these:
#   --ServerApp.sock=PATH (or --port=P)  --ServerApp.base_url=/s/<id>/
# Listens where it is told, as JupyterLab would, and on a TCP port of its own besides (the "direct"
# measurement). Serves <base>api/status (JSON: the readiness probe) and <base>1k (1,024 bytes).
# Runs nginx in the foreground (exec), so the runtime's process-group stop ends it.
set -euo pipefail
port= base= sock=
for arg in "$@"; do
  case "$arg" in
    --port=*) port=${arg#--port=} ;;
    --ServerApp.sock=*) sock=${arg#--ServerApp.sock=} ;;
    --ServerApp.base_url=*) base=${arg#--ServerApp.base_url=} ;;
  esac
done
[ -n "$port$sock" ] && [ -n "$base" ] || { echo "nginx-editor: need --ServerApp.sock= or --port=, and --ServerApp.base_url=" >&2; exit 2; }
[ -n "$port" ] || port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sock_listen=""
[ -z "$sock" ] || { rm -f "$sock"; sock_listen="listen unix:$sock;"; }
case "$base" in */) ;; *) base="$base/" ;; esac
# The server gives each session a run directory (JUPYTER_RUNTIME_DIR=<data>/run/<id>/jupyter).
if [ -n "${JUPYTER_RUNTIME_DIR:-}" ]; then dir=$(dirname "$JUPYTER_RUNTIME_DIR")/nginx; else dir=$(mktemp -d); fi
mkdir -p "$dir/www/api" "$dir/tmp"
printf '{"started": "bench stand-in", "connections": 0, "kernels": 0}\n' > "$dir/www/api/status"
head -c 1023 /dev/zero | tr '\0' 'x' > "$dir/www/1k"; echo >> "$dir/www/1k"   # 1,024 bytes
user_line=""
[ "$(id -u)" = 0 ] && user_line="user root;"   # workers may read a data dir that is mode 0700
cat > "$dir/nginx.conf" <<CONF
$user_line
worker_processes 1;
pid $dir/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  default_type application/octet-stream;
  keepalive_requests 1000000;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  server {
    listen 127.0.0.1:$port;
    $sock_listen
    location $base { alias $dir/www/; }
  }
}
CONF
printf '{"port": %s, "socket": "%s", "pid": %s, "base": "%s"}\n' "$port" "$sock" "$$" "$base" > "$dir/../standin.json"
exec nginx -e stderr -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;'
