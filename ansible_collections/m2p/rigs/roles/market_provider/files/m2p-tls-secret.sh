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
umask 077
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! "$k3s" kubectl get namespace "$namespace" --output name > /dev/null 2> "$dir/get.err"; then
  grep -q NotFound "$dir/get.err" && exit 3
  cat "$dir/get.err" >&2
  exit 1
fi
# A config file, not -addext (OpenSSL 1.1.1 and newer only); the names as subjectAltName, the CN short (at most
# 64 characters: a long domain's wildcard would not fit).
cn=$1
[ ${#cn} -le 64 ] || cn=m2p-self-signed
{
  printf '[req]\ndistinguished_name = dn\nx509_extensions = ext\nprompt = no\n[dn]\nCN = %s\n[ext]\n' "$cn"
  printf 'subjectAltName = '
  sep=""
  for dns in "$@"; do printf '%sDNS:%s' "$sep" "$dns"; sep=","; done
  printf '\n'
} > "$dir/req.cnf"
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -config "$dir/req.cnf" \
  -keyout "$dir/tls.key" -out "$dir/tls.crt" 2> "$dir/openssl.err" || { cat "$dir/openssl.err" >&2; exit 1; }
crt=$(base64 < "$dir/tls.crt" | tr -d '\n')
key=$(base64 < "$dir/tls.key" | tr -d '\n')
printf '{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/tls","metadata":{"name":"%s","namespace":"%s",'\
'"labels":{"app.kubernetes.io/managed-by":"m2p"}},"data":{"tls.crt":"%s","tls.key":"%s"}}' \
  "$name" "$namespace" "$crt" "$key" | "$k3s" kubectl apply --server-side --field-manager=m2p -f -
