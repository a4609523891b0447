#!/bin/sh
# m2p role market_provider: a self-signed TLS Secret made on the k3s server itself (the ingress's placeholder
# certificates, as Akash's provider-playbooks makes them when no ACME DNS provider is set).  The key is made in a
# private temporary folder, sent to the API on stdin and removed: it never reaches the controller, a log or k3s's
# manifests folder.
# Usage: m2p-tls-secret.sh K3S NAME NAMESPACE DNS-NAME...   Exit 3: the namespace is not there yet (k3s's deploy
# controller makes it from m2p's manifest; the next apply finishes).
set -eu
k3s=$1 name=$2 namespace=$3
shift 3
"$k3s" kubectl get namespace "$namespace" --output name > /dev/null 2>&1 || exit 3
umask 077
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
san=""
for dns in "$@"; do san="${san:+$san,}DNS:$dns"; done
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$1" -addext "subjectAltName=$san" \
  -keyout "$dir/tls.key" -out "$dir/tls.crt" 2> "$dir/openssl.err" || { cat "$dir/openssl.err" >&2; exit 1; }
crt=$(base64 < "$dir/tls.crt" | tr -d '\n')
key=$(base64 < "$dir/tls.key" | tr -d '\n')
printf '{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/tls","metadata":{"name":"%s","namespace":"%s",'\
'"labels":{"app.kubernetes.io/managed-by":"m2p"}},"data":{"tls.crt":"%s","tls.key":"%s"}}' \
  "$name" "$namespace" "$crt" "$key" | "$k3s" kubectl apply --server-side --field-manager=m2p -f -
