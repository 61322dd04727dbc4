#!/bin/sh
# Entrypoint of the gamewire image (deploy/Dockerfile): runs the CLI with the image's Node.
#
# `serve` keeps its HTTP endpoints on the container's loopback unless they are guarded, exactly
# as outside a container; the image only makes "guarded" mean "reachable through a published port":
#   GAMEWIRE_ADMIN_TOKEN set           -> --admin-host 0.0.0.0 (dashboard, /api, /metrics on 9100)
#   GAMEWIRE_UNITY_RELAY_API_KEY set   -> --api-host 0.0.0.0   (the allocation API on 37080)
# Flags given to `docker run … serve …` come after these, so they win.
set -eu
if [ "${1:-}" = serve ]; then
  shift
  extra=""
  if [ -n "${GAMEWIRE_ADMIN_TOKEN:-}${GAMEWIRE_SERVE_ADMIN_TOKEN:-}" ]; then extra="$extra --admin-host 0.0.0.0"; fi
  if [ -n "${GAMEWIRE_UNITY_RELAY_API_KEY:-}" ]; then extra="$extra --api-host 0.0.0.0"; fi
  # shellcheck disable=SC2086 # $extra is a list of flags without spaces inside them
  set -- serve $extra "$@"
fi
exec node /opt/gamewire/bin/gamewire.js "$@"
