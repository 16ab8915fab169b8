#!/usr/bin/env bash
# Makes throwaway certificates with openssl (3.0 or newer) for trying TLS and mTLS on one
# machine: a CA, a server certificate for localhost and 127.0.0.1 signed by it, and a client
# certificate whose identity (URI SAN) is spiffe://jobwire.test/<client name>. The demo's
# secure mode (scripts/demo.sh --secure) and the Python suite (tests/python) use it; the
# walk-through in docs/security.md shows the same commands one by one. Not for production: the CA's key sits
# next to the certificates, and they expire after 30 days.
#
# Usage: bash scripts/dev-certs.sh DIR [CLIENT_NAME]
# Writes DIR/ca.crt ca.key server.crt server.key client.crt client.key (keys 0600, DIR 0700).
set -euo pipefail
dir=${1:?usage: dev-certs.sh DIR [CLIENT_NAME]}
client=${2:-demo-client}
mkdir -p "$dir" && chmod 700 "$dir"
cd "$dir"
umask 077
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -subj "/CN=jobwire test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -x509 "${ec[@]}" -keyout server.key -out server.crt -subj "/CN=localhost" \
  -CA ca.crt -CAkey ca.key \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "extendedKeyUsage=serverAuth" \
  -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
openssl req -x509 "${ec[@]}" -keyout client.key -out client.crt -subj "/CN=$client" \
  -CA ca.crt -CAkey ca.key \
  -addext "subjectAltName=URI:spiffe://jobwire.test/$client" -addext "extendedKeyUsage=clientAuth" \
  -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
chmod 644 ca.crt server.crt client.crt
