"""deploy/k8s: every manifest parses and the essentials hold. No cluster is needed (none
is available to the tests): this checks structure and references, not a rollout."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.streams import SERVICES
from tests.support import REPO_ROOT

K8S = REPO_ROOT / "deploy" / "k8s"


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs.extend(load(K8S / name))
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.fast
def test_every_manifest_parses_and_the_kustomization_lists_them_all() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    files = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    for path in K8S.glob("*.yaml"):
        for doc in load(path):
            assert doc.get("apiVersion") and doc.get("kind"), path
            if doc["kind"] != "Kustomization":
                assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    assert {i["name"] for i in kustomization["images"]} == {"loopline"}


@pytest.mark.fast
def test_kinds(manifests: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in manifests)
    assert kinds.count("Deployment") == len(SERVICES) + 1  # and the HTTP gateway
    assert kinds.count("StatefulSet") == 1
    assert {"Namespace", "ConfigMap", "Secret", "Service"} <= set(kinds)


@pytest.mark.fast
def test_one_deployment_per_service_runs_loopline_serve_name(
    manifests: list[dict[str, Any]],
) -> None:
    deployments = by_kind(manifests, "Deployment")
    assert set(deployments) == {f"loopline-{s}" for s in (*SERVICES, "api")}
    images = set()
    for service in SERVICES:
        deployment = deployments[f"loopline-{service}"]
        spec = deployment["spec"]
        template = spec["template"]
        labels = template["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items())
        pod = template["spec"]
        assert pod["terminationGracePeriodSeconds"] >= 40
        (container,) = pod["containers"]
        assert container["command"] == ["loopline", "serve", service]
        images.add(container["image"])
        requests = container["resources"]["requests"]
        assert requests["cpu"] and requests["memory"]
        assert container["resources"]["limits"]["memory"]
        probe = container["livenessProbe"]
        assert "services.redisconn import healthy" in " ".join(probe["exec"]["command"])
        assert probe["periodSeconds"] <= 30 and probe["timeoutSeconds"] >= 3
        assert pod["securityContext"]["runAsNonRoot"] is True
    assert len(images) == 1  # one image for every service


@pytest.mark.fast
def test_env_refs_resolve_to_the_configmap_and_secret(manifests: list[dict[str, Any]]) -> None:
    configmaps = by_kind(manifests, "ConfigMap")
    secrets = by_kind(manifests, "Secret")

    def keys(kind: str, name: str) -> set[str]:
        source = configmaps if kind == "configMap" else secrets
        assert name in source, f"{kind} {name} is not in the manifests"
        doc = source[name]
        return set(doc.get("data", {})) | set(doc.get("stringData", {}))

    seen: dict[str, set[str]] = {}
    workloads = {**by_kind(manifests, "Deployment"), **by_kind(manifests, "StatefulSet")}
    for name, deployment in workloads.items():
        env: set[str] = set()
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            for source in container.get("envFrom", []):
                for kind in ("configMap", "secret"):
                    ref = source.get(f"{kind}Ref")
                    if ref:
                        env |= keys(kind, ref["name"])
            for var in container.get("env", []):
                value_from = var.get("valueFrom", {})
                for kind in ("configMap", "secret"):
                    ref = value_from.get(f"{kind}KeyRef")
                    if ref:
                        assert ref["key"] in keys(kind, ref["name"]), (name, var)
                env.add(var["name"])
        seen[name] = env
    for name, env in seen.items():
        if name.startswith("loopline-"):
            assert {"REDIS_URL", "LOOPLINE_PREFIX"} <= env, name
    assert {"OPENAI_BASE_URL", "OPENAI_API_KEY"} <= seen["loopline-model"]
    # the services' Redis address names the in-cluster Redis Service
    address = configmaps["loopline-config"]["data"]["REDIS_ADDRESS"]
    assert address.split("/", 1)[0].split(":")[0] in by_kind(manifests, "Service")


@pytest.mark.fast
def test_redis_statefulset_with_aof_a_volume_and_a_service(
    manifests: list[dict[str, Any]],
) -> None:
    (redis,) = by_kind(manifests, "StatefulSet").values()
    services = {
        name: s for name, s in by_kind(manifests, "Service").items() if name.startswith("redis")
    }
    spec = redis["spec"]
    assert spec["serviceName"] in services
    assert services[spec["serviceName"]]["spec"].get("clusterIP") == "None"
    (container,) = spec["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    data_dir = args[args.index("--dir") + 1]
    (claim,) = spec["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == data_dir
    assert claim["spec"]["resources"]["requests"]["storage"]
    labels = spec["template"]["metadata"]["labels"]
    for service in services.values():
        assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
        assert service["spec"]["ports"][0]["port"] == 6379
    assert container["resources"]["requests"]


@pytest.mark.fast
def test_the_gateway_serves_one_port_behind_a_service(manifests: list[dict[str, Any]]) -> None:
    api = by_kind(manifests, "Deployment")["loopline-api"]
    pod = api["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["loopline", "serve", "api"]
    (port,) = container["ports"]
    env = {v["name"]: v for v in container["env"]}
    assert env["LOOPLINE_API_HOST"]["value"] == "0.0.0.0"
    assert env["LOOPLINE_API_PORT"]["value"] == str(port["containerPort"])
    assert env["LOOPLINE_API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == "loopline-secrets"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/ok"
    service = by_kind(manifests, "Service")["loopline-api"]
    labels = pod["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    (exposed,) = service["spec"]["ports"]
    assert exposed["targetPort"] == port["name"]


def test_kustomize_builds_when_kubectl_is_here() -> None:
    """`kubectl kustomize` renders offline (no cluster): the kustomization is valid and
    every object lands in the namespace with the image kustomize sets."""
    import shutil
    import subprocess

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize build is not checked")
    out = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert all(
        d["metadata"].get("namespace") == "loopline" for d in docs if d["kind"] != "Namespace"
    )
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == len(SERVICES) + 1
    for d in deployments:
        (container,) = d["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "loopline:local"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "loopline"


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' dependent variables: ``$(NAME)`` is the value of an earlier variable."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def _container_env(container: dict[str, Any], manifests: list[dict[str, Any]]) -> dict[str, str]:
    """The environment the kubelet would give the container: envFrom first, then env in
    order, each resolved from the manifests' ConfigMaps and Secrets."""

    def data(kind: str, name: str) -> dict[str, str]:
        doc = by_kind(manifests, kind)[name]
        return {**doc.get("data", {}), **doc.get("stringData", {})}

    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(data("ConfigMap", source["configMapRef"]["name"]))
        if "secretRef" in source:
            env.update(data("Secret", source["secretRef"]["name"]))
    for var in container.get("env", []):
        ref = var.get("valueFrom", {})
        if "configMapKeyRef" in ref:
            value = data("ConfigMap", ref["configMapKeyRef"]["name"])[ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref:
            value = data("Secret", ref["secretKeyRef"]["name"])[ref["secretKeyRef"]["key"]]
        else:
            value = _expand(var["value"], env)
        env[var["name"]] = value
    return env


def test_each_service_connects_as_its_own_user_of_the_acl_file_redis_reads(
    manifests: list[dict[str, Any]], tmp_path: Path
) -> None:
    """No cluster, the manifests' own wiring: run the Redis pod's init container command
    with the environment it gets (the Secret's placeholder passwords), start a
    redis-server with the file it wrote (as the Redis container's --aclfile), and connect
    with each Deployment's REDIS_URL as the kubelet expands it."""
    import subprocess
    import sys

    import redis as syncredis
    from redis.exceptions import NoPermissionError

    from loopline.testing.redis_server import RedisServer
    from services.redisconn import healthy

    (redis_set,) = by_kind(manifests, "StatefulSet").values()
    pod = redis_set["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (server_container,) = pod["containers"]
    acl_dir = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}["acl"]
    read_dir = {m["name"]: m["mountPath"] for m in server_container["volumeMounts"]}["acl"]
    args = server_container["args"]
    aclfile = args[args.index("--aclfile") + 1]
    assert aclfile.startswith(read_dir + "/")

    env = {**os.environ, **_container_env(init, manifests), "PYTHONPATH": str(REPO_ROOT)}
    command = [part.replace(acl_dir, str(tmp_path)) for part in init["command"]]
    command = [sys.executable if part == "python" else part for part in command]
    bin_dir = Path(sys.executable).parent  # the `loopline` console script beside python
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = tmp_path / aclfile.removeprefix(read_dir + "/")
    assert "replace-me" not in written.read_text()  # hashes only

    server = RedisServer(tmp_path, persistent=False, extra=("--aclfile", str(written))).start()
    try:
        anonymous = syncredis.Redis(port=server.port)
        assert anonymous.ping()  # the readiness probe, as the default user
        with pytest.raises(NoPermissionError):
            anonymous.get("loopline:tasks")
        anonymous.close()
        for service in SERVICES:
            deployment = by_kind(manifests, "Deployment")[f"loopline-{service}"]
            (container,) = deployment["spec"]["template"]["spec"]["containers"]
            url = _container_env(container, manifests)["REDIS_URL"]
            prefix = _container_env(container, manifests)["LOOPLINE_PREFIX"]
            local = url.replace("@redis:6379/", f"@127.0.0.1:{server.port}/")
            assert local != url, url
            assert f"://{prefix}-{service}:" in local
            assert healthy(local), f"{service} cannot log in with {url}"  # its liveness probe
            # the password is that user's own: as another user it does not log in
            assert not healthy(local.replace(f"{prefix}-{service}:", f"{prefix}-producer:"))
    finally:
        server.stop()
