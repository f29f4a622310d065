#!/usr/bin/env bash
# Copies the files the Helm chart carries from their one source of truth into
# the chart, so that deploy/helm/kwd is self-contained (no symbolic links:
# helm warns "found symbolic link in path" on every command otherwise):
#   crds/*.yaml            -> deploy/helm/kwd/crds/
#   deploy/grafana/*.json  -> deploy/helm/kwd/dashboards/
# Edit the top-level files, then run this. With --check it changes nothing and
# exits 1 when a chart copy differs (tests/deploy/helm_chart_test.py runs the
# same comparison).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/deploy/helm/kwd"
check=false
if [[ "${1:-}" == "--check" ]]; then
  check=true
elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/sync-chart-files.sh [--check]" >&2
  exit 2
fi

status=0
sync() {  # source-dir pattern chart-subdir
  local from="$root/$1" pattern="$2" to="$chart/$3"
  if [[ -L "$to" ]]; then
    $check && { echo "sync-chart-files: $to is a symbolic link" >&2; status=1; return; }
    rm "$to"
  fi
  $check || mkdir -p "$to"
  local name
  for file in "$from"/$pattern; do
    name="$(basename "$file")"
    if ! cmp -s "$file" "$to/$name"; then
      if $check; then
        echo "sync-chart-files: $3/$name differs from $1/$name" >&2
        status=1
      else
        cp "$file" "$to/$name"
        echo "sync-chart-files: updated $3/$name"
      fi
    fi
  done
  for file in "$to"/$pattern; do
    [[ -e "$file" ]] || continue
    name="$(basename "$file")"
    if [[ ! -e "$from/$name" ]]; then
      if $check; then
        echo "sync-chart-files: $3/$name has no source $1/$name" >&2
        status=1
      else
        rm "$file"
        echo "sync-chart-files: removed $3/$name"
      fi
    fi
  done
}

sync crds '*.yaml' crds
sync deploy/grafana '*.json' dashboards
exit "$status"
