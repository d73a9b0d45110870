#!/usr/bin/env python3
r"""Generate aws-plugin/data/us-east-1.json, the EC2 instance type catalogue for one region.

Generated with: moto==5.2.1 (PyPI, Apache-2.0), Python 3.11.

What it reads:
  * moto's EC2 data (what moto's own DescribeInstanceTypes serves):
      moto/ec2/resources/instance_types.json.gz
      moto/ec2/resources/instance_type_offerings/region/<region>.json.gz
      moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz
      moto/ec2/resources/instance_type_offerings/availability-zone-id/<region>.json.gz
    (zone name -> zone ID is derived from the last two; see zone_ids_from_offerings).
  * an on-demand price table given as an argument: JSON of the form
      {"generated": ..., "source": ..., "unit": ..., "regions": {"<region>": {"<type>": <USD/h>}}}

What it writes: one JSON document, one instance type per line (diff-friendly, valid JSON), keys
sorted, types sorted by name, zones sorted. The per-type "info" object keeps EC2's own field names
(a subset of DescribeInstanceTypes' InstanceTypeInfo) so aws-plugin's in-memory EC2 can serve it
as-is; "zones" and "onDemandPrice" sit beside it because they come from other APIs
(DescribeInstanceTypeOfferings and the pricing table). No timestamps are written except the
price table's own "generated" date, copied, so reruns on the same inputs are byte-identical.

How to run (from the repository root):

    python3 -m venv /tmp/catalogue-venv
    /tmp/catalogue-venv/bin/pip install 'moto==5.2.1'
    /tmp/catalogue-venv/bin/python aws-plugin/data/generate_catalogue.py \
        --prices /path/to/aws-on-demand-prices.json \
        --output aws-plugin/data/us-east-1.json

A different moto version is refused unless --allow-other-moto is given (then record the new
version here and in README.md).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import json
import os
import sys
from typing import Any

PINNED_MOTO_VERSION = "5.2.1"
FORMAT_VERSION = 1

# The DescribeInstanceTypes fields an AWS provider needs for upstream Karpenter's labels
# (karpenter.k8s.aws/instance-*), capacity (cpu, memory, pods, ephemeral-storage, GPUs,
# accelerators, EFA) and overhead. A nested dict names the sub-fields kept; True keeps the
# whole value. Everything else moto ships (boot modes, placement groups, ENA queues...) is
# dropped to keep the file small.
KEPT_FIELDS: dict[str, Any] = {
    "InstanceType": True,
    "CurrentGeneration": True,
    "SupportedUsageClasses": True,
    "BurstablePerformanceSupported": True,
    "Hypervisor": True,
    "BareMetal": True,
    "SupportedVirtualizationTypes": True,
    "ProcessorInfo": {
        "SupportedArchitectures": True,
        "Manufacturer": True,
        "SustainedClockSpeedInGhz": True,
        # `nested-virtualization`, for EC2NodeClass `cpuOptions.nestedVirtualization`.
        "SupportedFeatures": True,
    },
    # The placement group strategies the type supports, for `placementGroupSelector`.
    "PlacementGroupInfo": True,
    "VCpuInfo": {
        "DefaultVCpus": True,
        "DefaultCores": True,
        "DefaultThreadsPerCore": True,
    },
    "MemoryInfo": {"SizeInMiB": True},
    "GpuInfo": True,
    "InferenceAcceleratorInfo": True,
    "NeuronInfo": True,
    "InstanceStorageSupported": True,
    "InstanceStorageInfo": {
        "TotalSizeInGB": True,
        "Disks": True,
        "NvmeSupport": True,
        "EncryptionSupport": True,
    },
    "EbsInfo": {
        "EbsOptimizedSupport": True,
        "EbsOptimizedInfo": True,
        "NvmeSupport": True,
        "EncryptionSupport": True,
        "MaximumEbsAttachments": True,
        "AttachmentLimitType": True,
    },
    "NetworkInfo": {
        "NetworkPerformance": True,
        "MaximumNetworkInterfaces": True,
        "MaximumNetworkCards": True,
        "DefaultNetworkCardIndex": True,
        "NetworkCards": {
            "NetworkCardIndex": True,
            "NetworkPerformance": True,
            "MaximumNetworkInterfaces": True,
            "BaselineBandwidthInGbps": True,
            "PeakBandwidthInGbps": True,
        },
        "Ipv4AddressesPerInterface": True,
        "Ipv6AddressesPerInterface": True,
        "Ipv6Supported": True,
        "EnaSupport": True,
        "EfaSupported": True,
        "EfaInfo": True,
        "EncryptionInTransitSupported": True,
    },
}


def project(value: Any, spec: Any) -> Any:
    """Keep the parts of `value` that `spec` names (lists are projected element-wise)."""
    if spec is True:
        return value
    if isinstance(value, list):
        return [project(item, spec) for item in value]
    if not isinstance(value, dict):
        raise ValueError(f"expected an object to project, got {value!r}")
    return {key: project(value[key], sub) for key, sub in spec.items() if key in value}


def load_gz_json(path: str) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def zone_ids_from_offerings(
    by_name: dict[str, set[str]], by_id: dict[str, set[str]]
) -> dict[str, str]:
    """Zone name -> zone ID, matched by identical offered-type sets.

    moto's offering files were captured from one real account, whose name -> ID mapping
    differs from the fixed table in moto's availability_zones_and_regions.py (names map to IDs
    per account in real AWS). Deriving it from the offerings keeps DescribeInstanceTypeOfferings
    by name and by ID consistent with each other; each match must be unique.
    """
    mapping: dict[str, str] = {}
    for name, types in sorted(by_name.items()):
        matches = [zone_id for zone_id, id_types in by_id.items() if id_types == types]
        if len(matches) != 1:
            raise SystemExit(f"zone {name}: {len(matches)} zone IDs offer exactly its types")
        mapping[name] = matches[0]
    if len(set(mapping.values())) != len(mapping) or set(mapping.values()) != set(by_id):
        raise SystemExit(f"zone names and IDs do not pair up one to one: {mapping}")
    return mapping


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--prices", required=True, help="on-demand price table (JSON)")
    parser.add_argument("--output", required=True, help="catalogue to write")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--allow-other-moto", action="store_true")
    args = parser.parse_args()

    import moto

    moto_version = importlib.metadata.version("moto")
    if moto_version != PINNED_MOTO_VERSION and not args.allow_other_moto:
        print(
            f"moto {moto_version} is installed but this script is pinned to "
            f"{PINNED_MOTO_VERSION}; use a venv with moto=={PINNED_MOTO_VERSION} "
            "or pass --allow-other-moto",
            file=sys.stderr,
        )
        return 2

    resources = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources")
    offerings_dir = os.path.join(resources, "instance_type_offerings")
    all_types: dict[str, dict[str, Any]] = load_gz_json(
        os.path.join(resources, "instance_types.json.gz")
    )
    region_offers = load_gz_json(os.path.join(offerings_dir, "region", f"{args.region}.json.gz"))
    az_offers = load_gz_json(
        os.path.join(offerings_dir, "availability-zone", f"{args.region}.json.gz")
    )
    az_id_offers = load_gz_json(
        os.path.join(offerings_dir, "availability-zone-id", f"{args.region}.json.gz")
    )

    with open(args.prices, encoding="utf-8") as f:
        price_doc = json.load(f)
    prices: dict[str, float] = price_doc["regions"][args.region]

    zones_by_type: dict[str, set[str]] = {}
    for offer in az_offers:
        zones_by_type.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    types_by_zone: dict[str, set[str]] = {}
    for offer in az_offers:
        types_by_zone.setdefault(offer["Location"], set()).add(offer["InstanceType"])
    types_by_zone_id: dict[str, set[str]] = {}
    for offer in az_id_offers:
        types_by_zone_id.setdefault(offer["Location"], set()).add(offer["InstanceType"])

    zone_ids = zone_ids_from_offerings(types_by_zone, types_by_zone_id)

    # DescribeInstanceTypes in a region answers only the types offered there; moto's type
    # file is global, so the region's offering list decides membership.
    region_types = sorted({offer["InstanceType"] for offer in region_offers})
    missing_info = [t for t in region_types if t not in all_types]
    if missing_info:
        raise SystemExit(f"offered but not described by moto: {missing_info}")
    not_in_region = sorted(set(all_types) - set(region_types))

    entries = []
    unpriced = []
    for name in region_types:
        price = prices.get(name)
        if price is None:
            unpriced.append(name)
        entries.append(
            {
                "instanceType": name,
                "info": project(all_types[name], KEPT_FIELDS),
                "zones": sorted(zones_by_type.get(name, ())),
                "onDemandPrice": price,
            }
        )

    header = {
        "formatVersion": FORMAT_VERSION,
        "region": args.region,
        "zones": [
            {"zoneName": name, "zoneId": zone_ids[name]} for name in sorted(types_by_zone)
        ],
        "source": {
            "moto": {
                "version": moto_version,
                "licence": "Apache-2.0",
                "files": [
                    "moto/ec2/resources/instance_types.json.gz",
                    f"moto/ec2/resources/instance_type_offerings/region/{args.region}.json.gz",
                    "moto/ec2/resources/instance_type_offerings/availability-zone/"
                    f"{args.region}.json.gz",
                    "moto/ec2/resources/instance_type_offerings/availability-zone-id/"
                    f"{args.region}.json.gz",
                ],
            },
            "prices": {
                "generated": price_doc.get("generated"),
                "source": price_doc.get("source"),
                "unit": price_doc.get("unit"),
            },
        },
        "instanceTypeCount": len(entries),
        "unpricedInstanceTypes": unpriced,
    }

    def dumps(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    # Compact JSON with sorted keys, except that each instance type gets a line of its own:
    # still one valid JSON value, but diffs show which types changed.
    document = dict(header, instanceTypes=entries)
    parts = []
    for key in sorted(document):
        if key == "instanceTypes":
            rows = ",\n".join(dumps(e) for e in entries)
            parts.append(f'"instanceTypes":[\n{rows}\n]')
        else:
            parts.append(f"{dumps(key)}:{dumps(document[key])}")
    text = "{" + ",".join(parts) + "}\n"
    if json.loads(text) != document:
        raise SystemExit("internal error: the line-per-type layout changed the document")

    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, args.output)

    print(f"moto {moto_version}, region {args.region}")
    print(f"instance types: {len(entries)} (moto describes {len(all_types)}; "
          f"{len(not_in_region)} not offered in {args.region}: {', '.join(not_in_region)})")
    print(f"zones: {len(types_by_zone)} ({', '.join(sorted(types_by_zone))})")
    print(f"types with an on-demand price: {len(entries) - len(unpriced)}; "
          f"without: {len(unpriced)}: {', '.join(unpriced)}")
    print(f"types offered in no zone: {sum(1 for e in entries if not e['zones'])}")
    print(f"wrote {args.output}: {os.path.getsize(args.output)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
