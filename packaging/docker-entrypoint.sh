#!/bin/sh
# Creates the key directory on the first start, then runs httpcrypt with
# it (serve and gateway) as PID 1, so that it gets docker's signals.
set -eu
KEYS=/var/lib/httpcrypt/keys
if [ ! -e "$KEYS/identity.key" ]; then
    httpcrypt keygen --dir "$KEYS" >/dev/null
fi
case "${1:-}" in
    serve|gateway) cmd=$1; shift; exec httpcrypt "$cmd" --keys "$KEYS" "$@" ;;
    *) exec httpcrypt "$@" ;;
esac
