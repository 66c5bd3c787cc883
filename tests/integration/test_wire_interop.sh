#!/bin/sh
# test_wire_interop.sh - runs test_wire_interop.py (a Python gRPC client of
# flotilla-pserver generated from proto/ at test time; see its docstring)
# with Debian's /usr/bin/python3, where python3-grpcio and
# python3-grpc-tools live (deploy/deps.sh installs them).  SKIP (77)
# without them.
if [ ! -x /usr/bin/python3 ]; then
  echo "SKIP: no /usr/bin/python3 (deploy/deps.sh installs python3, python3-grpcio, python3-grpc-tools)"
  exit 77
fi
exec timeout -k 10 300 /usr/bin/python3 "${FL_SRCDIR:-../..}/tests/integration/test_wire_interop.py"
