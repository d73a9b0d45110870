"""An example third-party cloud provider plugin, in Python, written from the proto alone.

It shows what a plugin author needs and nothing more: the three proto files under
proto/karpenter/cloudprovider/v1, grpcio, and the standard health and reflection services.
Its "cloud" is a dictionary in memory with three instance types in two zones, so it can run
anywhere; a real plugin would call its cloud's API where this one touches `self.instances`.

Run it (grpcio, grpcio-tools, grpcio-health-checking, grpcio-reflection and grpcio-status from
PyPI):

    python plugin.py --endpoint unix:///tmp/python-plugin.sock

then, for example, `core-svc plugin-info --plugin-endpoint unix:///tmp/python-plugin.sock`
or `grpcurl -plaintext -unix /tmp/python-plugin.sock list`.
"""

import argparse
import atexit
import importlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from grpc_reflection.v1alpha import reflection
from grpc_tools import protoc

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"
PROTO_FILES = ["identity.proto", "types.proto", "cloudprovider.proto"]
PACKAGE = "karpenter.cloudprovider.v1"


def generate_stubs():
    """Compiles the API with grpcio-tools' bundled protoc into a temporary package."""
    out = Path(tempfile.mkdtemp(prefix="cloudprovider-stubs-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    well_known = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
    ] + [str(PROTO_ROOT / "karpenter/cloudprovider/v1" / f) for f in PROTO_FILES]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed to compile the plugin API")
    for directory in ["karpenter", "karpenter/cloudprovider", "karpenter/cloudprovider/v1"]:
        (out / directory / "__init__.py").touch()
    sys.path.insert(0, str(out))
    modules = {}
    for name in ["identity_pb2", "identity_pb2_grpc", "types_pb2", "cloudprovider_pb2", "cloudprovider_pb2_grpc"]:
        modules[name] = importlib.import_module(f"karpenter.cloudprovider.v1.{name}")
    return modules


pb = generate_stubs()
identity_pb2, identity_grpc = pb["identity_pb2"], pb["identity_pb2_grpc"]
types_pb2 = pb["types_pb2"]
cp_pb2, cp_grpc = pb["cloudprovider_pb2"], pb["cloudprovider_pb2_grpc"]

ZONES = ["example-zone-a", "example-zone-b"]
ARCH = "amd64"
CAPACITY_TYPE = "on-demand"
NODE_CLASS = ("example.dev", "ExampleNodeClass")
ERROR_DOMAIN = "cloudprovider.karpenter.v1"
# What the node keeps for itself: allocatable = capacity - overhead.
OVERHEAD = {"cpu": "100m", "memory": "256Mi"}
# The label domain this provider owns, and its labels: declared to core by GetPluginVocabulary,
# set on every instance type through its requirements.
DOMAIN = "example.dev"
LABEL_SIZE = f"{DOMAIN}/instance-size"
LABEL_CPU = f"{DOMAIN}/instance-cpu"
# name -> (cpu, memory, price per hour on-demand)
CATALOGUE = {"small": ("2", "4Gi", 0.05), "medium": ("4", "16Gi", 0.2), "large": ("16", "64Gi", 0.8)}


def requirement(key, *values):
    return types_pb2.Requirement(key=key, operator=types_pb2.OPERATOR_IN, values=list(values))


def abort(context, code, reason, message, **metadata):
    """Ends the call with `code` and the ErrorInfo the API asks for on every error."""
    info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    context.abort_with_status(rpc_status.to_status(status))


def allows(requirements, key, value):
    """Whether every requirement on `key` admits `value` (In, NotIn, Exists, DoesNotExist)."""
    for r in requirements:
        if r.key != key:
            continue
        if r.operator == types_pb2.OPERATOR_IN and value not in r.values:
            return False
        if r.operator == types_pb2.OPERATOR_NOT_IN and value in r.values:
            return False
        if r.operator == types_pb2.OPERATOR_DOES_NOT_EXIST:
            return False
    return True


def check_node_class(context, node_class):
    """Refuses a node class of another kind than ours (an absent one is allowed)."""
    if not node_class.fields:
        return
    api_version = node_class.fields["apiVersion"].string_value if "apiVersion" in node_class.fields else ""
    kind = node_class.fields["kind"].string_value if "kind" in node_class.fields else ""
    group = api_version.split("/")[0] if "/" in api_version else ""
    if (group, kind) != NODE_CLASS:
        found = f"{group}/{kind}"
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_NODE_CLASS_KIND_UNSUPPORTED",
              f"node_class: {found} is not a kind this plugin manages; it manages {NODE_CLASS[0]}/{NODE_CLASS[1]}",
              kind=found)


def allocatable(cpu, memory):
    """Capacity less the overhead, in Kubernetes quantities."""
    cpu_millis = int(cpu) * 1000 - int(OVERHEAD["cpu"].rstrip("m"))
    memory_mi = int(memory.rstrip("Gi")) * 1024 - int(OVERHEAD["memory"].rstrip("Mi"))
    return {"cpu": f"{cpu_millis}m", "memory": f"{memory_mi}Mi", "pods": "110"}


def instance_type(name):
    cpu, memory, price = CATALOGUE[name]
    return types_pb2.InstanceType(
        name=name,
        requirements=[
            requirement("node.kubernetes.io/instance-type", name),
            requirement("kubernetes.io/arch", ARCH),
            requirement("kubernetes.io/os", "linux"),
            requirement("topology.kubernetes.io/zone", *ZONES),
            requirement("karpenter.sh/capacity-type", CAPACITY_TYPE),
            requirement(LABEL_SIZE, name),
            requirement(LABEL_CPU, cpu),
        ],
        offerings=[
            types_pb2.Offering(
                zone=zone,
                capacity_type=CAPACITY_TYPE,
                price=price,
                currency="USD",
                availability=types_pb2.AVAILABILITY_AVAILABLE,
            )
            for zone in ZONES
        ],
        capacity={"cpu": cpu, "memory": memory, "pods": "110"},
        overhead=types_pb2.Overhead(kube_reserved=OVERHEAD),
    )


class Identity(identity_grpc.IdentityServiceServicer):
    def GetPluginInfo(self, request, context):
        return identity_pb2.GetPluginInfoResponse(
            name="example.python.plugin", vendor_version="0.1.0", api_version="1.0"
        )

    def GetPluginCapabilities(self, request, context):
        rpc = identity_pb2.PluginCapability.Rpc
        return identity_pb2.GetPluginCapabilitiesResponse(
            capabilities=[
                identity_pb2.PluginCapability(rpc=rpc(type=rpc.TYPE_IS_DRIFTED)),
                identity_pb2.PluginCapability(rpc=rpc(type=rpc.TYPE_GET)),
            ]
        )

    def GetPluginVocabulary(self, request, context):
        label = identity_pb2.LabelDefinition
        return identity_pb2.GetPluginVocabularyResponse(
            labels=[
                label(key=LABEL_SIZE, value_type=identity_pb2.LABEL_VALUE_TYPE_STRING,
                      description="The instance size: small, medium or large."),
                label(key=LABEL_CPU, value_type=identity_pb2.LABEL_VALUE_TYPE_INTEGER,
                      description="The number of vCPUs of the instance type."),
            ],
            restricted_label_domains=[DOMAIN],
        )

    def Probe(self, request, context):
        return identity_pb2.ProbeResponse(ready=True)


class CloudProvider(cp_grpc.CloudProviderServiceServicer):
    def __init__(self):
        self.lock = threading.Lock()
        self.instances = {}  # NodeClaim name -> NodeClaim as launched

    def GetSupportedNodeClasses(self, request, context):
        return cp_pb2.GetSupportedNodeClassesResponse(
            node_classes=[types_pb2.NodeClassKind(group="example.dev", version="v1", kind="ExampleNodeClass")]
        )

    def GetInstanceTypes(self, request, context):
        check_node_class(context, request.node_class)
        # One chunk per type, only to show the streaming: real plugins fill chunks up to ~1 MiB.
        for name in CATALOGUE:
            yield cp_pb2.GetInstanceTypesResponse(instance_types=[instance_type(name)])

    def Create(self, request, context):
        claim = request.node_claim
        if not claim.name:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD",
                  "node_claim.name: must not be empty", field="node_claim.name")
        check_node_class(context, request.node_class)
        requirements = list(claim.spec.requirements)
        allowed = [r for r in requirements if r.key == "node.kubernetes.io/instance-type"]
        if not allowed or allowed[0].operator != types_pb2.OPERATOR_IN or not allowed[0].values:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD",
                  "node_claim.spec.requirements: an In requirement on node.kubernetes.io/instance-type is required",
                  field="node_claim.spec.requirements")
        with self.lock:
            # Idempotent by name: a retried Create returns what the first one launched.
            if claim.name in self.instances:
                return cp_pb2.CreateResponse(
                    node_claim=self.instances[claim.name], state=cp_pb2.LAUNCH_STATE_LAUNCHED
                )
            # Every requirement is honoured: types, zones, capacity type, architecture.
            choices = [t for t in allowed[0].values if t in CATALOGUE and allows(requirements, "kubernetes.io/arch", ARCH)
                       and allows(requirements, "karpenter.sh/capacity-type", CAPACITY_TYPE)]
            zones = [z for z in ZONES if allows(requirements, "topology.kubernetes.io/zone", z)]
            if not choices or not zones:
                abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "ERROR_REASON_INSUFFICIENT_CAPACITY",
                      f"no offering the NodeClaim allows exists: types [{' '.join(allowed[0].values)}], "
                      f"zones [{' '.join(zones)}], capacity types [{CAPACITY_TYPE}] on {ARCH}",
                      instance_types=",".join(allowed[0].values), zones=",".join(zones), capacity_types=CAPACITY_TYPE)
            cheapest = min(choices, key=lambda t: CATALOGUE[t][2])
            cpu, memory, _ = CATALOGUE[cheapest]
            zone = zones[len(self.instances) % len(zones)]
            launched = types_pb2.NodeClaim(
                name=claim.name,
                uid=claim.uid,
                labels={
                    "node.kubernetes.io/instance-type": cheapest,
                    "topology.kubernetes.io/zone": zone,
                    "karpenter.sh/capacity-type": CAPACITY_TYPE,
                    "kubernetes.io/arch": ARCH,
                    LABEL_SIZE: cheapest,
                    LABEL_CPU: cpu,
                },
                status=types_pb2.NodeClaimStatus(
                    provider_id=f"example://{zone}/{uuid.uuid4()}",
                    image_id="example-image-1",
                    capacity={"cpu": cpu, "memory": memory, "pods": "110"},
                    allocatable=allocatable(cpu, memory),
                    instance_state=types_pb2.INSTANCE_STATE_RUNNING,
                ),
            )
            self.instances[claim.name] = launched
            return cp_pb2.CreateResponse(node_claim=launched, state=cp_pb2.LAUNCH_STATE_LAUNCHED)

    def Delete(self, request, context):
        if not request.node_claim_name:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD",
                  "node_claim_name: must not be empty", field="node_claim_name")
        with self.lock:
            name = request.node_claim_name
            known = self.instances.get(name)
            if known is not None and request.provider_id and known.status.provider_id != request.provider_id:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD",
                      f"provider_id: {request.provider_id} is not the instance of {name}", field="provider_id")
            # This cloud terminates instantly; a real one answers TERMINATING until gone.
            self.instances.pop(name, None)
        return cp_pb2.DeleteResponse(state=cp_pb2.DELETION_STATE_GONE)

    def Get(self, request, context):
        with self.lock:
            for claim in self.instances.values():
                if claim.status.provider_id == request.provider_id:
                    return cp_pb2.GetResponse(node_claim=claim)
        abort(context, grpc.StatusCode.NOT_FOUND, "ERROR_REASON_INSTANCE_NOT_FOUND",
              f"no instance {request.provider_id}", provider_id=request.provider_id)

    def IsDrifted(self, request, context):
        provider_id = request.node_claim.status.provider_id
        if not provider_id:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD",
                  "node_claim.status.provider_id: missing; IsDrifted needs a launched NodeClaim",
                  field="node_claim.status.provider_id")
        with self.lock:
            known = any(c.status.provider_id == provider_id for c in self.instances.values())
        if not known:
            # An instance this plugin does not know is gone, never "not drifted".
            abort(context, grpc.StatusCode.NOT_FOUND, "ERROR_REASON_INSTANCE_NOT_FOUND",
                  f"no instance {provider_id}", provider_id=provider_id)
        # This cloud has one image that never changes: a known instance never drifts.
        return cp_pb2.IsDriftedResponse()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="unix:///tmp/python-plugin.sock")
    args = parser.parse_args()
    if not args.endpoint.startswith("unix:///"):
        parser.error("this example serves on unix:///abs/path only")
    socket_path = args.endpoint[len("unix://"):]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    identity_grpc.add_IdentityServiceServicer_to_server(Identity(), server)
    cp_grpc.add_CloudProviderServiceServicer_to_server(CloudProvider(), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ["", f"{PACKAGE}.IdentityService", f"{PACKAGE}.CloudProviderService"]:
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [
            identity_pb2.DESCRIPTOR.services_by_name["IdentityService"].full_name,
            cp_pb2.DESCRIPTOR.services_by_name["CloudProviderService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )

    # The socket is created 0600, as the API recommends, under a temporary name, and renamed
    # into place only once the server accepts connections: whoever waits for the path to
    # appear can connect at once.
    temporary_path = f"{socket_path}.{os.getpid()}.tmp"
    old_umask = os.umask(0o177)
    try:
        server.add_insecure_port(f"unix://{temporary_path}")
        server.start()
    finally:
        os.umask(old_umask)
    os.rename(temporary_path, socket_path)
    atexit.register(lambda: os.path.exists(socket_path) and os.remove(socket_path))
    logging.info("serving on %s", args.endpoint)

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    logging.info("shutting down")
    server.stop(grace=5).wait()


if __name__ == "__main__":
    main()
