"""`sagemaker_ray://RAYCLUSTER/NAMESPACE` through the real toolkit (the sagemaker extra) against
a stand-in Kubernetes API: each way the endpoint can fail is one line naming what is missing.

The stand-in answers the toolkit's RayDashboardConnection request as EKS does: 404 when the
named RayCluster (or the endpoint operator's API) is not there, 403 for a RayCluster another
principal created, and 201 without a connection URL when the endpoint is not enabled.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from rlkit.cluster.address import resolve_address, sagemaker_target
from rlkit.cluster.client import connect
from rlkit.errors import RlkitError, UsageError

ANSWERS = {("ray", "rlkit"): 201, ("ray", "someone-elses"): 403}
"""(namespace, RayCluster) -> the stand-in API's status; any other is not found (404)."""


class FakeEksApi(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        namespace = self.path.split("/namespaces/")[1].split("/")[0]
        status = ANSWERS.get((namespace, body["spec"].get("clusterName")), 404)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"status": {}}).encode())  # no connectionUrl

    def log_message(self, *args):
        pass


@pytest.fixture
def eks(tmp_path, monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), FakeEksApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {
        "current-context": "hp",
        "contexts": [{"name": "hp", "context": {"cluster": "hp", "user": "me"}}],
        "clusters": [
            {"name": "hp", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
        ],
        "users": [{"name": "me", "user": {"token": "t"}}],
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    yield
    server.shutdown()


@pytest.mark.parametrize(
    ("address", "words"),
    [
        # the HyperPod cluster's name where the RayCluster's belongs: what the docs once said
        ("sagemaker_ray://hp-rlkit/ray", "no RayCluster 'hp-rlkit' in namespace 'ray'"),
        ("sagemaker_ray://rlkit", "no RayCluster 'rlkit' in namespace 'default'"),
        ("sagemaker_ray://someone-elses/ray", "only the RayCluster's creator may submit"),
        ("sagemaker_ray://rlkit/ray", "SageMaker Spaces add-on"),
    ],
)
def test_each_endpoint_failure_names_what_is_missing(eks, address, words):
    with pytest.raises(RlkitError) as e:
        connect(address, timeout_s=20)
    message = str(e.value)
    assert words in message and "\n" not in message


def test_the_address_names_a_raycluster_and_a_namespace():
    assert sagemaker_target("sagemaker_ray://rlkit/ray") == ("rlkit", "ray")
    assert sagemaker_target("sagemaker_ray://rlkit") == ("rlkit", "default")  # the toolkit's
    with pytest.raises(UsageError, match="RAYCLUSTER/NAMESPACE"):
        resolve_address("sagemaker_ray:///ray")
