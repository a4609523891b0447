#!/bin/sh
# Prints the nft that loads m2p's pod filter on this rig (role k3s, pods_on.yml), or says on stdout why there is none
# and exits 1.  The rig's own nft first; else the one k3s bundles: k3s-root ships a static nft in bin/aux since
# v0.14.1 (k3s-io/k3s-root scripts/package, commit 1f35cfd "Add nftables binary"; k3s releases of late 2025 bundle
# v0.15: k3s-io/k3s scripts/version.sh VERSION_ROOT), which k3s unpacks into DATA_DIR/data/<hash>/ with DATA_DIR/data/current
# pointing there, on any command that runs one of its tools, kubectl among them (k3s-io/k3s cmd/k3s/main.go,
# stageAndRun -> extract).  k3s reads its data-dir from /etc/rancher/k3s/config.yaml, so the role writes that first.
# An nft is usable only if the kernel answers it (nf_tables): `nft list tables` reads and changes nothing.
#   find-nft.sh K3S_BIN DATA_DIR unpack|look   (look: a plan, nothing is unpacked)
k3s=$1
bundled=$2/data/current/bin/aux/nft
mode=$3
if ! nft=$(command -v nft); then
    if [ ! -x "$bundled" ] && [ "$mode" = unpack ] && [ -x "$k3s" ]; then
        "$k3s" kubectl version --client >/dev/null 2>&1
    fi
    nft=$bundled
    if [ ! -x "$nft" ] && [ "$mode" = look ]; then
        echo "nft is not installed (nftables) and k3s has not unpacked its own yet (convert has it do so)"
        exit 1
    elif [ ! -x "$nft" ]; then
        echo "nft is not installed (nftables) and k3s brings none"
        exit 1
    fi
fi
if ! "$nft" list tables >/dev/null 2>&1; then
    echo "the kernel refuses nftables ($nft list tables failed)"
    exit 1
fi
echo "$nft"
