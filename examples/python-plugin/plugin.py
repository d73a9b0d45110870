"""An example third-party cloud provider plugin, in Python, written from the proto alone.

It shows what a plugin author needs and nothing more: the three proto files under
proto/karpenter/cloudprovider/v1, grpcio, and the standard health and reflection services.
Its "cloud" is a dictionary in memory (four instance types in two zones, on-demand and spot,
amd64 and arm64, two images), so it can run anywhere; a real plugin would call its cloud's API
where this one touches `self.instances`. It implements every RPC of the API, optional ones
included, and passes every check of the conformance suite (`provider-conformance`).

Run it (the dependencies are in pyproject.toml; see README.md):

    python plugin.py --endpoint unix:///tmp/python-plugin.sock

then, for example, `core-svc plugin-info --plugin-endpoint unix:///tmp/python-plugin.sock`,
`provider-conformance --endpoint unix:///tmp/python-plugin.sock`
or `grpcurl -plaintext -unix /tmp/python-plugin.sock list`.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2, json_format, struct_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from grpc_reflection.v1alpha import reflection
from grpc_tools import protoc

# The proto files: beside this file in the repository; set CLOUDPROVIDER_PROTO_ROOT (the
# directory holding karpenter/cloudprovider/v1) when the plugin is installed elsewhere.
PROTO_ROOT = Path(os.environ.get("CLOUDPROVIDER_PROTO_ROOT", Path(__file__).resolve().parents[2] / "proto"))
PROTO_FILES = ["identity.proto", "types.proto", "cloudprovider.proto"]
PACKAGE = "karpenter.cloudprovider.v1"


def generate_stubs() -> dict[str, ModuleType]:
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
        raise SystemExit(f"protoc failed to compile the plugin API from {PROTO_ROOT}")
    for directory in ["karpenter", "karpenter/cloudprovider", "karpenter/cloudprovider/v1"]:
        (out / directory / "__init__.py").touch()
    sys.path.insert(0, str(out))
    modules = {}
    for name in ["identity_pb2", "identity_pb2_grpc", "types_pb2", "cloudprovider_pb2", "cloudprovider_pb2_grpc"]:
        modules[name] = importlib.import_module(f"karpenter.cloudprovider.v1.{name}")
    return modules


# The generated modules are made at start-up, so type checkers see their messages as Any.
pb = generate_stubs()
identity_pb2: Any = pb["identity_pb2"]
identity_grpc: Any = pb["identity_pb2_grpc"]
types_pb2: Any = pb["types_pb2"]
cp_pb2: Any = pb["cloudprovider_pb2"]
cp_grpc: Any = pb["cloudprovider_pb2_grpc"]
Message = Any

ZONES = ["example-zone-a", "example-zone-b"]
CAPACITY_TYPES = ["on-demand", "spot"]
# Spot costs this share of the on-demand price.
SPOT_DISCOUNT = 0.3
NODE_CLASS = ("example.dev", "ExampleNodeClass")
# The annotation core stamps the node class's static hash under (`<group>/<lowercase kind>-hash`).
HASH_ANNOTATION = "example.dev/examplenodeclass-hash"
HASH_VERSION = "v1"
ERROR_DOMAIN = "cloudprovider.karpenter.v1"
# The images this cloud has; a node class may pick one in `spec.image`.
IMAGES = {"example-image-1", "example-image-2"}
DEFAULT_IMAGE = "example-image-1"
# What the node keeps for itself: allocatable = capacity - overhead.
OVERHEAD = {"cpu": "100m", "memory": "256Mi"}
# The label domain this provider owns, and its labels: declared to core by GetPluginVocabulary,
# set on every instance type through its requirements.
DOMAIN = "example.dev"
LABEL_SIZE = f"{DOMAIN}/instance-size"
LABEL_CPU = f"{DOMAIN}/instance-cpu"
# name -> (cpu, memory, architecture, price per hour on-demand)
CATALOGUE = {
    "small": ("2", "4Gi", "amd64", 0.05),
    "medium": ("4", "16Gi", "amd64", 0.2),
    "medium-arm": ("4", "16Gi", "arm64", 0.16),
    "large": ("16", "64Gi", "amd64", 0.8),
}
# Well-known labels.
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ARCH = "kubernetes.io/arch"


def requirement(key: str, *values: str) -> Message:
    return types_pb2.Requirement(key=key, operator=types_pb2.OPERATOR_IN, values=list(values))


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str, message: str,
          **metadata: str) -> NoReturn:
    """Ends the call with `code` and the ErrorInfo the API asks for on every error."""
    info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returns only by raising")


def invalid(context: grpc.ServicerContext, field: str, problem: str) -> NoReturn:
    """INVALID_ARGUMENT with reason INVALID_FIELD naming `field`."""
    abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD", f"{field}: {problem}",
          field=field)


def not_found(context: grpc.ServicerContext, provider_id: str) -> NoReturn:
    abort(context, grpc.StatusCode.NOT_FOUND, "ERROR_REASON_INSTANCE_NOT_FOUND",
          f"no instance {provider_id}", provider_id=provider_id)


def allows(requirements: list[Message], key: str, value: str) -> bool:
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


def to_json(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def node_class_spec(context: grpc.ServicerContext, node_class: struct_pb2.Struct,
                    field: str = "node_class") -> dict[str, Any] | None:
    """The spec of a node class of our kind; None when none was sent. Refuses another kind
    (NODE_CLASS_KIND_UNSUPPORTED) and a spec that is not an object or names an image that is
    not a string (INVALID_FIELD)."""
    if not node_class.fields:
        return None
    obj = to_json(node_class)
    api_version = obj.get("apiVersion", "")
    group = api_version.split("/")[0] if "/" in api_version else ""
    kind = obj.get("kind", "")
    if (group, kind) != NODE_CLASS:
        found = f"{group}/{kind}"
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_NODE_CLASS_KIND_UNSUPPORTED",
              f"{field}: {found} is not a kind this plugin manages; it manages {NODE_CLASS[0]}/{NODE_CLASS[1]}",
              kind=found)
    spec = obj.get("spec", {})
    if not isinstance(spec, dict):
        invalid(context, f"{field}.spec", "must be an object")
    if not isinstance(spec.get("image", DEFAULT_IMAGE), str):
        invalid(context, f"{field}.spec.image", "must be a string")
    return spec


def static_hash(spec: dict[str, Any]) -> str:
    """The hash of the node class's static fields: here the whole spec."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def allocatable(cpu: str, memory: str) -> dict[str, str]:
    """Capacity less the overhead, in Kubernetes quantities."""
    cpu_millis = int(cpu) * 1000 - int(OVERHEAD["cpu"].rstrip("m"))
    memory_mi = int(memory.rstrip("Gi")) * 1024 - int(OVERHEAD["memory"].rstrip("Mi"))
    return {"cpu": f"{cpu_millis}m", "memory": f"{memory_mi}Mi", "pods": "110"}


def price(name: str, capacity_type: str) -> float:
    on_demand = CATALOGUE[name][3]
    return round(on_demand * SPOT_DISCOUNT, 4) if capacity_type == "spot" else on_demand


def instance_type(name: str) -> Message:
    cpu, memory, arch, _ = CATALOGUE[name]
    return types_pb2.InstanceType(
        name=name,
        requirements=[
            requirement(INSTANCE_TYPE, name),
            requirement(ARCH, arch),
            requirement("kubernetes.io/os", "linux"),
            requirement(ZONE, *ZONES),
            requirement(CAPACITY_TYPE, *CAPACITY_TYPES),
            requirement(LABEL_SIZE, name),
            requirement(LABEL_CPU, cpu),
        ],
        offerings=[
            types_pb2.Offering(
                zone=zone,
                capacity_type=capacity_type,
                price=price(name, capacity_type),
                currency="USD",
                availability=types_pb2.AVAILABILITY_AVAILABLE,
            )
            for zone in ZONES
            for capacity_type in CAPACITY_TYPES
        ],
        capacity={"cpu": cpu, "memory": memory, "pods": "110"},
        overhead=types_pb2.Overhead(kube_reserved=OVERHEAD),
    )


class Identity(identity_grpc.IdentityServiceServicer):  # type: ignore[misc]
    def GetPluginInfo(self, request: Message, context: grpc.ServicerContext) -> Message:
        return identity_pb2.GetPluginInfoResponse(
            name="example.python.plugin", vendor_version="0.2.0", api_version="1.0"
        )

    def GetPluginCapabilities(self, request: Message, context: grpc.ServicerContext) -> Message:
        rpc = identity_pb2.PluginCapability.Rpc
        return identity_pb2.GetPluginCapabilitiesResponse(
            capabilities=[
                identity_pb2.PluginCapability(rpc=rpc(type=t))
                for t in [rpc.TYPE_RESOLVE_NODE_CLASS, rpc.TYPE_GET, rpc.TYPE_LIST, rpc.TYPE_IS_DRIFTED,
                          rpc.TYPE_GET_REPAIR_POLICIES, rpc.TYPE_CONVERT_NODE_CLASS,
                          rpc.TYPE_WATCH_INTERRUPTIONS]
            ]
        )

    def GetPluginVocabulary(self, request: Message, context: grpc.ServicerContext) -> Message:
        label = identity_pb2.LabelDefinition
        return identity_pb2.GetPluginVocabularyResponse(
            labels=[
                label(key=LABEL_SIZE, value_type=identity_pb2.LABEL_VALUE_TYPE_STRING,
                      description="The instance size: small, medium, medium-arm or large."),
                label(key=LABEL_CPU, value_type=identity_pb2.LABEL_VALUE_TYPE_INTEGER,
                      description="The number of vCPUs of the instance type."),
            ],
            restricted_label_domains=[DOMAIN],
        )

    def Probe(self, request: Message, context: grpc.ServicerContext) -> Message:
        return identity_pb2.ProbeResponse(ready=True)


class CloudProvider(cp_grpc.CloudProviderServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.instances: dict[str, Message] = {}  # NodeClaim name -> NodeClaim as launched

    def GetSupportedNodeClasses(self, request: Message, context: grpc.ServicerContext) -> Message:
        return cp_pb2.GetSupportedNodeClassesResponse(
            node_classes=[types_pb2.NodeClassKind(group=NODE_CLASS[0], version="v1", kind=NODE_CLASS[1])]
        )

    def ResolveNodeClass(self, request: Message, context: grpc.ServicerContext) -> Message:
        spec = node_class_spec(context, request.node_class)
        if spec is None:
            invalid(context, "node_class", "missing")
        image = spec.get("image", DEFAULT_IMAGE)
        ready = image in IMAGES
        condition = types_pb2.Condition(
            type="ImageReady",
            status=types_pb2.CONDITION_STATUS_TRUE if ready else types_pb2.CONDITION_STATUS_FALSE,
            reason="" if ready else "ImageNotFound",
            message="" if ready else f"image {image} does not exist; this cloud has {sorted(IMAGES)}",
        )
        status = struct_pb2.Struct()
        status.update({"image": image})
        return cp_pb2.ResolveNodeClassResponse(
            status=status, conditions=[condition], static_hash=static_hash(spec),
            static_hash_version=HASH_VERSION,
        )

    def GetInstanceTypes(self, request: Message, context: grpc.ServicerContext) -> Iterator[Message]:
        node_class_spec(context, request.node_class)
        # One chunk per type, only to show the streaming: real plugins fill chunks up to ~1 MiB.
        for name in CATALOGUE:
            yield cp_pb2.GetInstanceTypesResponse(instance_types=[instance_type(name)])

    def Create(self, request: Message, context: grpc.ServicerContext) -> Message:
        claim = request.node_claim
        if not claim.name:
            invalid(context, "node_claim.name", "must not be empty")
        spec = node_class_spec(context, request.node_class) or {}
        requirements = list(claim.spec.requirements)
        allowed = [r for r in requirements if r.key == INSTANCE_TYPE]
        if not allowed or allowed[0].operator != types_pb2.OPERATOR_IN or not allowed[0].values:
            invalid(context, "node_claim.spec.requirements",
                    f"an In requirement on {INSTANCE_TYPE} is required")
        with self.lock:
            # Idempotent by name: a retried Create returns what the first one launched.
            if claim.name in self.instances:
                return cp_pb2.CreateResponse(
                    node_claim=self.instances[claim.name], state=cp_pb2.LAUNCH_STATE_LAUNCHED
                )
            # Every requirement is honoured: types, zones, capacity types, architecture. The
            # cheapest offering that satisfies them all is launched.
            offerings = sorted(
                (price(name, capacity_type), name, zone, capacity_type)
                for name in allowed[0].values if name in CATALOGUE
                for zone in ZONES
                for capacity_type in CAPACITY_TYPES
                if allows(requirements, ARCH, CATALOGUE[name][2])
                and allows(requirements, ZONE, zone)
                and allows(requirements, CAPACITY_TYPE, capacity_type)
            )
            if not offerings:
                abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "ERROR_REASON_INSUFFICIENT_CAPACITY",
                      f"no offering the NodeClaim allows exists: types [{' '.join(allowed[0].values)}] "
                      f"in zones {ZONES} as {CAPACITY_TYPES}",
                      instance_types=",".join(allowed[0].values), zones=",".join(ZONES),
                      capacity_types=",".join(CAPACITY_TYPES))
            _, name, zone, capacity_type = offerings[0]
            cpu, memory, arch, _ = CATALOGUE[name]
            launched = types_pb2.NodeClaim(
                name=claim.name,
                uid=claim.uid,
                labels={
                    INSTANCE_TYPE: name,
                    ZONE: zone,
                    CAPACITY_TYPE: capacity_type,
                    ARCH: arch,
                    LABEL_SIZE: name,
                    LABEL_CPU: cpu,
                },
                status=types_pb2.NodeClaimStatus(
                    provider_id=f"example://{zone}/{uuid.uuid4()}",
                    image_id=spec.get("image", DEFAULT_IMAGE),
                    capacity={"cpu": cpu, "memory": memory, "pods": "110"},
                    allocatable=allocatable(cpu, memory),
                    instance_state=types_pb2.INSTANCE_STATE_RUNNING,
                ),
            )
            self.instances[claim.name] = launched
            return cp_pb2.CreateResponse(node_claim=launched, state=cp_pb2.LAUNCH_STATE_LAUNCHED)

    def Delete(self, request: Message, context: grpc.ServicerContext) -> Message:
        if not request.node_claim_name:
            invalid(context, "node_claim_name", "must not be empty")
        with self.lock:
            name = request.node_claim_name
            known = self.instances.get(name)
            if known is not None and request.provider_id and known.status.provider_id != request.provider_id:
                invalid(context, "provider_id", f"{request.provider_id} is not the instance of {name}")
            # This cloud terminates instantly; a real one answers TERMINATING until gone.
            self.instances.pop(name, None)
        return cp_pb2.DeleteResponse(state=cp_pb2.DELETION_STATE_GONE)

    def Get(self, request: Message, context: grpc.ServicerContext) -> Message:
        with self.lock:
            for claim in self.instances.values():
                if claim.status.provider_id == request.provider_id:
                    return cp_pb2.GetResponse(node_claim=claim)
        not_found(context, request.provider_id)

    def List(self, request: Message, context: grpc.ServicerContext) -> Message:
        with self.lock:
            claims = sorted(self.instances.values(), key=lambda c: c.status.provider_id)
        # The token is the provider ID the next page starts after: stable while instances come
        # and go (pages need not form a consistent snapshot).
        after = request.page_token
        if after and not after.startswith("example://"):
            invalid(context, "page_token", f"{after!r} is not a token this plugin gave")
        page = [c for c in claims if c.status.provider_id > after]
        size = request.page_size if request.page_size > 0 else 100
        more = len(page) > size
        page = page[:size]
        return cp_pb2.ListResponse(node_claims=page,
                                   next_page_token=page[-1].status.provider_id if more else "")

    def IsDrifted(self, request: Message, context: grpc.ServicerContext) -> Message:
        claim = request.node_claim if request.HasField("node_claim") else None
        if claim is None and request.node_claim_object.fields:
            # The NodeClaim as kubectl prints it (for people asking with grpcurl).
            obj = to_json(request.node_claim_object)
            claim = types_pb2.NodeClaim(
                name=obj.get("metadata", {}).get("name", ""),
                annotations=obj.get("metadata", {}).get("annotations", {}),
                status=types_pb2.NodeClaimStatus(provider_id=obj.get("status", {}).get("providerID", "")),
            )
        if claim is None:
            invalid(context, "node_claim", "missing; IsDrifted needs the launched NodeClaim")
        provider_id = claim.status.provider_id
        if not provider_id:
            invalid(context, "node_claim.status.provider_id", "missing; IsDrifted needs a launched NodeClaim")
        with self.lock:
            instance = next((c for c in self.instances.values() if c.status.provider_id == provider_id), None)
        if instance is None:
            # An instance this plugin does not know is gone, never "not drifted".
            not_found(context, provider_id)
        spec = node_class_spec(context, request.node_class)
        if spec is None:
            return cp_pb2.IsDriftedResponse()
        stamped = claim.annotations.get(HASH_ANNOTATION)
        if stamped is not None and stamped != static_hash(spec):
            return cp_pb2.IsDriftedResponse(
                reason="NodeClassDrift",
                message=f"the node class's static hash is {static_hash(spec)}; the NodeClaim was launched at {stamped}",
            )
        image = spec.get("image", DEFAULT_IMAGE)
        if instance.status.image_id != image:
            return cp_pb2.IsDriftedResponse(
                reason="ImageDrift",
                message=f"instance runs {instance.status.image_id}; the node class now selects {image}",
            )
        return cp_pb2.IsDriftedResponse()

    def GetRepairPolicies(self, request: Message, context: grpc.ServicerContext) -> Message:
        ten_minutes = duration_pb2.Duration(seconds=600)
        return cp_pb2.GetRepairPoliciesResponse(policies=[
            types_pb2.RepairPolicy(condition_type="Ready", condition_status=status,
                                   toleration_duration=ten_minutes)
            for status in [types_pb2.CONDITION_STATUS_FALSE, types_pb2.CONDITION_STATUS_UNKNOWN]
        ])

    def WatchInterruptions(self, request: Message, context: grpc.ServicerContext) -> Iterator[Message]:
        """This cloud interrupts nothing: the stream stays open and quiet until core closes it.
        A real plugin yields WatchInterruptionsResponse(notices=[...]) as its cloud sends them,
        each notice again until AckInterruptions names it."""
        # grpc-python sends a stream's headers with its first message: send them now, or core
        # waits for a notice to learn that the stream opened.
        context.send_initial_metadata(())
        while context.is_active():
            time.sleep(0.2)
        yield from ()

    def AckInterruptions(self, request: Message, context: grpc.ServicerContext) -> Message:
        # Nothing was sent, so nothing is kept: acknowledging any id is OK.
        return cp_pb2.AckInterruptionsResponse()

    def ConvertNodeClass(self, request: Message, context: grpc.ServicerContext) -> Message:
        """For `core-svc convert`: this plugin's older API, `v1alpha1`, named the image
        `imageName`; v1 calls it `image`. A current object comes back as it is (less its
        status); a kind this plugin never had is not known, and core passes it through."""
        warnings: list[Message] = []
        if request.WhichOneof("source") == "inline_provider":
            # A provider block inline in an old Karpenter Provisioner: our v1alpha1 spec.
            name, old_spec, path = request.inline_provider.name, to_json(request.inline_provider.provider), "spec.provider"
        else:
            obj = to_json(request.object)
            group, _, version = obj.get("apiVersion", "").partition("/")
            if (group, obj.get("kind")) != NODE_CLASS or version not in ("v1alpha1", "v1"):
                return cp_pb2.ConvertNodeClassResponse(known=False)
            name, old_spec, path = obj.get("metadata", {}).get("name", ""), obj.get("spec", {}), "spec"
            if version == "v1":
                obj.pop("status", None)
                node_class_spec(context, request.object, field="object")
                converted = struct_pb2.Struct()
                converted.update(obj)
                return cp_pb2.ConvertNodeClassResponse(known=True, object=converted)
        if not isinstance(old_spec, dict):
            invalid(context, path, "must be an object")
        spec = {k: v for k, v in old_spec.items() if k != "imageName"}
        if "imageName" in old_spec:
            spec["image"] = old_spec["imageName"]
        if spec.get("image", DEFAULT_IMAGE) not in IMAGES:
            warnings.append(cp_pb2.ConversionWarning(
                path=f"{path}.imageName",
                message=f"image {spec['image']} does not exist in this cloud; pick one of {sorted(IMAGES)}"))
        converted = struct_pb2.Struct()
        converted.update({"apiVersion": f"{NODE_CLASS[0]}/v1", "kind": NODE_CLASS[1],
                          "metadata": {"name": name}, "spec": spec})
        return cp_pb2.ConvertNodeClassResponse(known=True, object=converted, warnings=warnings)


def main() -> None:
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
