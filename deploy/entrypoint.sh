#!/bin/sh
# Every container of the image starts here (Dockerfile ENTRYPOINT): a fresh, empty folder for the Prometheus
# counters of its processes (multiprocess mode, see orders/metrics.py), then the service's command.
set -eu
if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    rm -rf "$PROMETHEUS_MULTIPROC_DIR"
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
fi
exec "$@"
