#!/bin/sh
# What k3s leaves once its unit has stopped (the unit stops k3s alone, KillMode=process, so that
# a k3s restart never stops the pods): containerd and the containers' shims, run from binaries
# under k3s's data dir; the pods' processes, in kubepods cgroups; the mounts under /run/k3s, the
# kubelet's dirs, the data dir and /run/netns/cni-*; the CNI's interfaces and iptables chains.
# k3s's own k3s-killall.sh (from its install script, which m2p does not use) ends the same
# things; this is m2p's shorter account of them.  Prints one line per thing it ended, nothing
# when there was nothing to end (so a second revert reports no change).  $1: k3s's data dir.
set -u
data_dir=${1:?k3s data dir}

for proc in /proc/[0-9]*; do
	pid=${proc#/proc/}
	[ "$pid" = "$$" ] && continue
	exe=$(readlink "$proc/exe" 2>/dev/null) || continue
	case "$exe" in
	"$data_dir"/data/*) kill -KILL "$pid" 2>/dev/null && echo "ended process $pid ($exe)" ;;
	*) if grep -q kubepods "$proc/cgroup" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null && echo "ended process $pid (a pod's: $exe)"
	fi ;;
	esac
done

# Deepest first, lazily: a mount still busy goes once its last user has.
awk '{ print $2 }' /proc/self/mounts | sort -r | while read -r mount; do
	case "$mount" in
	/run/k3s | /run/k3s/* | /var/lib/kubelet/pods/* | /var/lib/kubelet/plugins/* | /run/netns/cni-* | "$data_dir"/*)
		umount -l "$mount" 2>/dev/null && echo "unmounted $mount" ;;
	esac
done

if command -v ip >/dev/null 2>&1; then
	for link in cni0 flannel.1 flannel-v6.1 flannel-wg flannel-wg-v6 kube-ipvs0; do
		if ip link show "$link" >/dev/null 2>&1; then
			ip link delete "$link" && echo "deleted interface $link"
		fi
	done
fi

# Only k3s's own chains (KUBE-*, CNI-*, flannel), the way k3s-killall.sh filters them; the
# owner's rules stay as they are.
for save in iptables-save ip6tables-save; do
	command -v "$save" >/dev/null 2>&1 || continue
	restore=$(echo "$save" | sed 's/-save$/-restore/')
	if "$save" 2>/dev/null | grep -qE 'KUBE-|CNI-|flannel'; then
		"$save" | grep -v KUBE- | grep -v CNI- | grep -iv flannel | "$restore" && echo "removed k3s's $save chains"
	fi
done

for dir in /var/lib/cni /run/k3s /run/flannel; do
	if [ -e "$dir" ]; then
		rm -rf "$dir" && echo "removed $dir"
	fi
done
exit 0
