"""The STAND-IN API's verdict on a pod a kubelet creates: NodeRestriction's mirror-pod rules, as the real API has them.

A kubelet (``system:node:<node>``) may create pods in any namespace: the Node authorizer allows every create, for
the mirror pods of its static pods, and leaves the limits to NodeRestriction (``plugin/pkg/auth/authorizer/node/
node_authorizer.go``, ``authorizePod``).  NodeRestriction admission lets through only a mirror pod bound to that
node and owned by that Node, which names no other API object.  The rules, in their order, with their messages, are
kubernetes/kubernetes@aab56e9b ``plugin/pkg/admission/noderestriction/admission.go``
(``admitPodCreate``); the pods' secret and configmap references are the ones ``pkg/api/pod/util.go`` visits
(``VisitPodSecretNames``, ``VisitPodConfigmapNames``).  The refusal is what ``admission.NewForbidden`` makes of
them: 403, reason Forbidden, ``pods "<name>" is forbidden: <rule>``.

So a taken rig's kubelet can still make a pod with any labels, in any namespace that exists, bound to itself: what
it cannot make is a pod another controller owns, or one without the mirror annotation.  That is what the farm's
reclaimer relies on (market/akash/reclaim.py, ``made_by_provider``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # api.MirrorPodAnnotationKey

# Volume fields that name a Secret, in the volume sources VisitPodSecretNames walks (azureFile.secretName,
# secret.secretName; cephfs, cinder, flexVolume, rbd, scaleIO, iscsi, storageos: secretRef; csi:
# nodePublishSecretRef).  Looked for at any depth of a volume: a source the stand-in does not name is refused too,
# never let through.
_SECRET_FIELDS = ("secretName", "secretRef", "nodePublishSecretRef")


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container, init and ephemeral too (podutil.AllContainers)."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                yield container


def _names(value: Any, fields: tuple[str, ...]) -> bool:
    """Whether ``value`` (a volume source, any depth) carries one of ``fields``."""
    if isinstance(value, dict):
        return any(k in fields and v for k, v in value.items()) or any(_names(v, fields) for v in value.values())
    if isinstance(value, list):
        return any(_names(v, fields) for v in value)
    return False


def _volumes(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in spec.get("volumes") or [] if isinstance(v, dict)]


def _env_refers(spec: dict[str, Any], env_from: str, value_from: str) -> bool:
    """Whether a container takes its environment from a Secret or ConfigMap (``envFrom[].<env_from>``,
    ``env[].valueFrom.<value_from>``)."""
    for container in _containers(spec):
        if any(isinstance(e, dict) and e.get(env_from) for e in container.get("envFrom") or []):
            return True
        if any(isinstance(e, dict) and (e.get("valueFrom") or {}).get(value_from) for e in container.get("env") or []):
            return True
    return False


def _projects(volume: dict[str, Any], kind: str) -> bool:
    """Whether a projected volume takes a ``kind`` source (secret, configMap, clusterTrustBundle)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return any(isinstance(source, dict) and source.get(kind) for source in sources)


def _references_secrets(spec: dict[str, Any]) -> bool:
    if spec.get("imagePullSecrets") or _env_refers(spec, "secretRef", "secretKeyRef"):
        return True
    for volume in _volumes(spec):
        if _projects(volume, "secret") or _names({k: v for k, v in volume.items() if k != "projected"}, _SECRET_FIELDS):
            return True
    return False


def _references_configmaps(spec: dict[str, Any]) -> bool:
    if _env_refers(spec, "configMapRef", "configMapKeyRef"):
        return True
    return any(volume.get("configMap") or _projects(volume, "configMap") for volume in _volumes(spec))


def mirror_pod_refusal(node: str, node_uid: str | None, pod: dict[str, Any]) -> str:
    """Why NodeRestriction refuses ``node``'s kubelet creating ``pod`` ('' when it admits it); ``node_uid``: the
    Node's uid (None: no such Node, which the real plugin answers with NotFound; said here as a refusal)."""
    meta: dict[str, Any] = pod["metadata"] if isinstance(pod.get("metadata"), dict) else {}
    spec: dict[str, Any] = pod["spec"] if isinstance(pod.get("spec"), dict) else {}
    if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
        return f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only create mirror pods'
    if spec.get("nodeName") != node:
        return f'node "{node}" can only create pods with spec.nodeName set to itself'
    owners = meta.get("ownerReferences") or []
    if len(owners) > 1:
        return f'node "{node}" can only create pods with a single owner reference set to itself'
    if not owners or not isinstance(owners[0], dict):
        return f'node "{node}" can only create pods with an owner reference set to itself'
    owner = owners[0]
    if owner.get("apiVersion") != "v1" or owner.get("kind") != "Node" or owner.get("name") != node:
        return f'node "{node}" can only create pods with an owner reference set to itself'
    if owner.get("controller") is not True:
        return f'node "{node}" can only create pods with a controller owner reference set to itself'
    if owner.get("blockOwnerDeletion") is True:
        return f'node "{node}" must not set blockOwnerDeletion on an owner reference'
    if node_uid is None:
        return f'nodes "{node}" not found'
    if owner.get("uid") != node_uid:
        return f"node {node} UID mismatch: expected {owner.get('uid')} got {node_uid}"
    if spec.get("serviceAccountName") or spec.get("serviceAccount"):  # v1's serviceAccount fills the name
        return f'node "{node}" can not create pods that reference a service account'
    if _references_secrets(spec):
        return f'node "{node}" can not create pods that reference secrets'
    if _references_configmaps(spec):
        return f'node "{node}" can not create pods that reference configmaps'
    if any(_projects(volume, "clusterTrustBundle") for volume in _volumes(spec)):
        return f'node "{node}" can not create pods that reference clustertrustbundles'
    if any(volume.get("persistentVolumeClaim") for volume in _volumes(spec)):
        return f'node "{node}" can not create pods that reference persistentvolumeclaims'
    return ""
