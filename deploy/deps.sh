#!/bin/sh
# deps.sh - install the Debian packages Flotilla builds, tests and runs with.
# Idempotent: asks apt only for what is missing.  Sourced or run by the
# README's two commands (run-main-job.sh, run-tests.sh) and by .ci/run.
set -eu
FL_PACKAGES="build-essential autoconf automake libtool pkg-config \
 libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev check \
 libopenblas-dev libyaml-dev zlib1g-dev dataset-fashion-mnist libonnx-dev \
 libmicrohttpd-dev libsystemd-dev gnuplot-nox systemd docker-compose \
 clang libclang-rt-14-dev openssl iproute2 procps python3 \
 slurm-wlm munge nftables openmpi-bin libopenmpi-dev etcd-server librocksdb-dev \
 python3-grpcio python3-grpc-tools python3-numpy python3-torch python3-onnx"

missing=
for p in $FL_PACKAGES ${FL_EXTRA_PACKAGES:-}; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "deps.sh: installing:$missing"
  SUDO=
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
