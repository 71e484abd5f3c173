#!/bin/sh
# Entry point of the jobservice images (run under tini): set up the accelerator environment, then
# exec the command (default: the image's CMD).
#
# Ascend: CANN's set_env.sh puts the toolkit's libraries, Python packages and tools on the paths;
# torch-npu needs them before it is imported, so it is sourced here, before the worker starts.
# JOBSERVICE_ASCEND_ENV_SCRIPT overrides the path; a missing script is skipped (CPU, CUDA images).
set -e
ascend_env="${JOBSERVICE_ASCEND_ENV_SCRIPT:-/usr/local/Ascend/ascend-toolkit/set_env.sh}"
if [ -f "$ascend_env" ]; then
  # set_env.sh reads unset variables; it must not run under `set -u`.
  # shellcheck disable=SC1090 # the path is a setting
  . "$ascend_env"
fi
exec "$@"
