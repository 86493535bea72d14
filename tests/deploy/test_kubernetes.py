"""deploy/kubernetes: every manifest of a core kind validates strictly (no unknown field) against
Kubernetes' published schemas; the ConfigMap's qdpd.conf is one qdpd itself accepts
(`qdpd --print-config`); the manifests agree with that configuration and with each other (probe
and metrics ports, the socket's folder, the tokens' file, the ServiceMonitor's selector); the
operator kinds (ServiceMonitor, MPIJob), which have no published schema there, have the fields
their operators read. Needs kubernetes-validate (tests/python.sh installs it) and PyYAML; qdpd
from $QDPD or build/daemon/qdpd."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, List

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install pyyaml)")
kv = pytest.importorskip("kubernetes_validate",
                         reason="kubernetes-validate is not installed (pip install "
                                "kubernetes-validate)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
# The oldest release still maintained when these manifests were written: the fields used are in
# every release since.
VERSION = "1.31.0"
OPERATOR_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"),
                  ("kubeflow.org/v2beta1", "MPIJob")}


def documents() -> List[Dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d:
                d["__file__"] = path.name
                docs.append(d)
    return docs


def find(kind: str, name: str) -> Dict[str, Any]:
    for d in documents():
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name} in deploy/kubernetes")


def config() -> Dict[str, str]:
    """The ConfigMap's qdpd.conf as key = value pairs."""
    text = find("ConfigMap", "qdpd-config")["data"]["qdpd.conf"]
    pairs = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, v = (s.strip() for s in line.split("=", 1))
            pairs[k] = v
    return pairs


def qdpd() -> str:
    path = os.environ.get("QDPD") or str(ROOT / "build" / "daemon" / "qdpd")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no qdpd at {path}: build it (sh deploy/build.sh) or set QDPD")
    return path


def pod_spec(d: Dict[str, Any]) -> Dict[str, Any]:
    return d["spec"] if d["kind"] == "Pod" else d["spec"]["template"]["spec"]


@pytest.mark.parametrize("doc", [d for d in documents()
                                 if (d["apiVersion"], d["kind"]) not in OPERATOR_KINDS],
                         ids=lambda d: f"{d['__file__']}:{d['kind']}")
def test_core_manifests_validate_strictly(doc: Dict[str, Any]) -> None:
    body = {k: v for k, v in doc.items() if k != "__file__"}
    kv.validate(body, VERSION, strict=True)


def test_a_field_the_schema_lacks_is_caught() -> None:
    """The validation above can fail: an unknown field in a container is refused."""
    ds = {k: v for k, v in find("DaemonSet", "qdpd").items() if k != "__file__"}
    ds["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, VERSION, strict=True)


def test_qdpd_accepts_the_configmaps_configuration() -> None:
    with tempfile.TemporaryDirectory() as d:
        conf = pathlib.Path(d) / "qdpd.conf"
        conf.write_text(find("ConfigMap", "qdpd-config")["data"]["qdpd.conf"])
        p = subprocess.run([qdpd(), "--config", str(conf), "--print-config"],
                           capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    for key, value in config().items():
        assert key in p.stdout, f"qdpd --print-config does not show {key}"


def test_qdpd_starts_and_stops_with_the_configmaps_configuration(tmp_path: pathlib.Path) -> None:
    """The checks between options that --print-config leaves out (TCP needs TLS or
    tcp_plaintext, the tokens file's mode) run at start: qdpd starts with the ConfigMap's
    configuration and the Secret's tokens, the socket, ports and devices moved to this test's
    (the node's paths and GPUs are not here), and exits 0 on SIGTERM."""
    conf = tmp_path / "qdpd.conf"
    conf.write_text(find("ConfigMap", "qdpd-config")["data"]["qdpd.conf"])
    tokens = tmp_path / "tokens"
    tokens.write_text(find("Secret", "qdpd-tokens")["stringData"]["tokens"])
    tokens.chmod(0o400)  # as the DaemonSet mounts it
    log = tmp_path / "qdpd.log"
    with open(log, "w") as err:
        p = subprocess.Popen([qdpd(), "--config", str(conf), "--socket", str(tmp_path / "s.sock"),
                              "--tcp", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0",
                              "--tcp_tokens_file", str(tokens), "--devices", "cpu:1"],
                             stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while "listening on unix:" not in log.read_text() and p.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, f"qdpd exited {p.returncode}: {log.read_text()}"
        assert "listening on unix:" in log.read_text(), log.read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(30)
    assert rc == 0, log.read_text()


def test_the_daemonset_agrees_with_the_configuration() -> None:
    ds = find("DaemonSet", "qdpd")
    spec = pod_spec(ds)
    c = config()
    (qdpd_c,) = [x for x in spec["containers"] if x["name"] == "qdpd"]
    tcp_port = int(c["tcp"].rsplit(":", 1)[1])
    metrics_port = int(c["metrics_listen"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in qdpd_c["ports"]}
    assert ports == {"grpc": tcp_port, "metrics": metrics_port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert qdpd_c[probe]["grpc"]["port"] == tcp_port, probe
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics_port)
    mounts = {m["name"]: m["mountPath"] for m in qdpd_c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    socket_dir = os.path.dirname(c["socket"])
    assert mounts["socket"] == socket_dir
    assert volumes["socket"]["hostPath"]["path"] == socket_dir
    assert c["tcp_tokens_file"].startswith(mounts["tokens"] + "/")
    secret = find("Secret", volumes["tokens"]["secret"]["secretName"])
    assert os.path.basename(c["tcp_tokens_file"]) in secret["stringData"]
    assert volumes["config"]["configMap"]["name"] == "qdpd-config"
    assert c.get("tcp_plaintext") == "yes", "the kubelet's gRPC probes speak plain TCP"
    assert "nvidia.com/gpu" in qdpd_c["resources"]["limits"]
    # Unprivileged: the daemon itself runs as a non-root user with no capability.
    sc = qdpd_c["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert spec["terminationGracePeriodSeconds"] >= 60


def test_the_client_mounts_the_daemons_socket_and_shares_its_pid_namespace() -> None:
    client, ds = find("Pod", "qdp-client-example"), find("DaemonSet", "qdpd")
    spec = pod_spec(client)
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["QDP_SOCKET"] == config()["socket"]
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert os.path.dirname(config()["socket"]) in host_paths
    # Views (CUDA IPC handles, leases by pid) hold within one PID namespace.
    assert spec["hostPID"] is True and pod_spec(ds)["hostPID"] is True


def test_the_operator_kinds_have_the_fields_their_operators_read() -> None:
    sm, svc = find("ServiceMonitor", "qdpd"), find("Service", "qdpd-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [p["name"] for p in svc["spec"]["ports"]]
    job = find("MPIJob", "qdpd-world")
    replicas = job["spec"]["mpiReplicaSpecs"]
    assert set(replicas) == {"Launcher", "Worker"}
    launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][0] == "mpirun" and "qdpd" in launcher["command"]
    worker = replicas["Worker"]["template"]["spec"]
    anti = worker["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"  # one rank per node
    # Their pod templates are core objects: validated as pods.
    for spec in (replicas["Launcher"]["template"]["spec"], worker):
        kv.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                     "spec": spec}, VERSION, strict=True)
