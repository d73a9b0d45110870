#!/usr/bin/env python3
"""moto's server (EC2, IAM, SSM... on one port), started in this process with its EC2 gaps
that aws-plugin meets fixed, for every test that runs against moto (aws-plugin's contract and
binary tests, integration-tests' end to end).

The product is right in each case; the emulator is corrected here, before the server starts:

- moto's CreateFleet launches its instances without the security groups of their launch
  template (it reads a `GroupSet` key that launch template data never has), where EC2 gives
  every instance the template's groups: against stock moto every instance aws-plugin launches
  looks SecurityGroupDrift-ed the moment it runs. Each launch spec of a fleet that names no
  groups of its own takes its template's `SecurityGroupIds`, or those of the primary network
  interface the template names.
- moto has no placement groups (EC2NodeClass `placementGroupSelector`): CreatePlacementGroup,
  DescribePlacementGroups (by id or name, filters `group-id`, `group-name`, `state`,
  `strategy`, `tag:<key>`) and DeletePlacementGroup are added, with EC2's fields and error
  codes (`InvalidPlacementGroup.Duplicate`, `InvalidPlacementGroup.Unknown`,
  `InvalidPlacementGroupId.Malformed`).
- moto has no capacity reservations (EC2NodeClass `capacityReservationSelectorTerms`):
  CreateCapacityReservation, CreateInterruptibleCapacityReservationAllocation (which makes an
  interruptible reservation out of part of another, as EC2 does for its owner) and
  DescribeCapacityReservations (by id, filters `state`, `owner-id`, `instance-type`,
  `availability-zone`, `instance-match-criteria`, `tag:<key>`, `tag-key`) are added, with
  EC2's fields and `InvalidCapacityReservationId.NotFound`.

    moto_launcher.py [--port-file PATH] [--host 127.0.0.1] [--port 0]

Port 0 (the default) lets the kernel pick a free port, so nothing races for it; the port is
written to PATH (atomically: a reader never sees half a number) once the server accepts
connections. Serves until SIGTERM or SIGINT.
"""

import argparse
import datetime
import os
import signal
import threading

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import fleets
from moto.ec2.responses import EC2Response
from moto.ec2.utils import random_id
from moto.server import ThreadedMotoServer


def _with_template_security_groups(create_requests):
    """Wraps Fleet.create_on_demand_requests / create_spot_requests: before they launch
    anything, a launch spec without groups gets those of its launch template version (of the
    template, or of its primary network interface)."""

    def wrapper(fleet, *args, **kwargs):
        for spec in fleet.launch_specs:
            template_spec = spec.launch_template_spec or {}
            if spec.group_set or "LaunchTemplateId" not in template_spec:
                continue
            template = fleet.ec2_backend.get_launch_template(template_spec["LaunchTemplateId"])
            version = template_spec.get("Version", template.default_version_number)
            data = template.get_version(version).data
            groups = list(data.get("SecurityGroupIds") or [])
            # A template naming its primary interface (device 0 on card 0) has the groups
            # there instead: EC2 refuses them in both places.
            for interface in data.get("NetworkInterfaces") or []:
                primary = int(interface.get("DeviceIndex", 0)) == 0
                if primary and int(interface.get("NetworkCardIndex", 0)) == 0:
                    groups = groups or list(interface.get("Groups") or [])
            spec.group_set = groups
        return create_requests(fleet, *args, **kwargs)

    return wrapper


PLACEMENT_STRATEGIES = ("cluster", "partition", "spread")


def _placement_groups(backend):
    """The placement groups of one account and region (moto's EC2 backend is per both)."""
    if not hasattr(backend, "karpenter_placement_groups"):
        backend.karpenter_placement_groups = {}
    return backend.karpenter_placement_groups


def _tags_of(response, resource_type):
    tags = response._parse_tag_specification(resource_type).get(resource_type, {})
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def create_placement_group(self):
    name = self._get_param("GroupName")
    strategy = self._get_param("Strategy")
    partition_count = self._get_int_param("PartitionCount")
    spread_level = self._get_param("SpreadLevel")
    if not name:
        raise EC2ClientError("MissingParameter", "The request must contain the parameter groupName")
    if strategy not in PLACEMENT_STRATEGIES:
        raise EC2ClientError(
            "InvalidParameterValue", f"Value ({strategy}) for parameter strategy is invalid."
        )
    if partition_count is not None and strategy != "partition":
        raise EC2ClientError(
            "InvalidParameterCombination", "PartitionCount is only valid with the partition strategy."
        )
    groups = _placement_groups(self.ec2_backend)
    if any(group["GroupName"] == name for group in groups.values()):
        raise EC2ClientError(
            "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists."
        )
    self.error_on_dryrun()
    group_id = random_id(prefix="pg")
    group = {
        "GroupName": name,
        "GroupId": group_id,
        "GroupArn": f"arn:aws:ec2:{self.region}:{self.current_account}:placement-group/{name}",
        "State": "available",
        "Strategy": strategy,
        "Tags": _tags_of(self, "placement-group"),
    }
    if strategy == "partition":
        # EC2's default is 2 partitions, at most 7 per zone.
        group["PartitionCount"] = partition_count or 2
    if strategy == "spread":
        group["SpreadLevel"] = spread_level or "rack"
    groups[group_id] = group
    return ActionResult({"PlacementGroup": group})


def _placement_group_matches(group, name, values):
    if name == "group-id":
        return group["GroupId"] in values
    if name == "group-name":
        return group["GroupName"] in values
    if name == "state":
        return group["State"] in values
    if name == "strategy":
        return group["Strategy"] in values
    if name.startswith("tag:"):
        key = name[len("tag:"):]
        return any(tag["Key"] == key and tag["Value"] in values for tag in group["Tags"])
    raise EC2ClientError(
        "InvalidParameterValue", f"The filter '{name}' is invalid for DescribePlacementGroups"
    )


def describe_placement_groups(self):
    names = self._get_param("GroupNames", [])
    ids = self._get_param("GroupIds", [])
    filters = self._filters_from_querystring()
    groups = list(_placement_groups(self.ec2_backend).values())
    for group_id in ids:
        if not group_id.startswith("pg-"):
            raise EC2ClientError(
                "InvalidPlacementGroupId.Malformed", f"Invalid id: \"{group_id}\" (expecting \"pg-...\")"
            )
        if not any(group["GroupId"] == group_id for group in groups):
            raise EC2ClientError(
                "InvalidPlacementGroup.Unknown", f"The Placement Group '{group_id}' is unknown."
            )
    for name in names:
        if not any(group["GroupName"] == name for group in groups):
            raise EC2ClientError(
                "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
            )
    if ids:
        groups = [group for group in groups if group["GroupId"] in ids]
    if names:
        groups = [group for group in groups if group["GroupName"] in names]
    for name, values in filters.items():
        groups = [group for group in groups if _placement_group_matches(group, name, values)]
    return ActionResult({"PlacementGroups": groups})


def delete_placement_group(self):
    name = self._get_param("GroupName")
    groups = _placement_groups(self.ec2_backend)
    found = [group_id for group_id, group in groups.items() if group["GroupName"] == name]
    if not found:
        raise EC2ClientError(
            "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
        )
    self.error_on_dryrun()
    del groups[found[0]]
    return ActionResult({})


def _capacity_reservations(backend):
    """The capacity reservations of one account and region."""
    if not hasattr(backend, "karpenter_capacity_reservations"):
        backend.karpenter_capacity_reservations = {}
    return backend.karpenter_capacity_reservations


def _new_capacity_reservation(response, instance_type, zone, count, criteria, tags, **extra):
    reservation_id = random_id(prefix="cr")
    account = response.current_account
    reservation = {
        "CapacityReservationId": reservation_id,
        "OwnerId": account,
        "CapacityReservationArn": (
            f"arn:aws:ec2:{response.region}:{account}:capacity-reservation/{reservation_id}"
        ),
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "State": "active",
        "InstanceMatchCriteria": criteria,
        "EndDateType": "unlimited",
        "CreateDate": datetime.datetime.now(datetime.timezone.utc),
        "StartDate": datetime.datetime.now(datetime.timezone.utc),
        "Tags": tags,
        "ReservationType": "default",
        "Interruptible": False,
    }
    reservation.update(extra)
    _capacity_reservations(response.ec2_backend)[reservation_id] = reservation
    return reservation


def create_capacity_reservation(self):
    instance_type = self._get_param("InstanceType")
    zone = self._get_param("AvailabilityZone")
    count = self._get_int_param("InstanceCount")
    if not instance_type or not zone or not count or count < 1:
        raise EC2ClientError(
            "MissingParameter",
            "InstanceType, AvailabilityZone and a positive InstanceCount are required",
        )
    self.error_on_dryrun()
    extra = {}
    end_date = self._get_param("EndDate")
    if end_date:
        extra["EndDate"] = end_date
        extra["EndDateType"] = "limited"
    reservation = _new_capacity_reservation(
        self,
        instance_type,
        zone,
        count,
        self._get_param("InstanceMatchCriteria") or "open",
        _tags_of(self, "capacity-reservation"),
        **extra,
    )
    return ActionResult({"CapacityReservation": reservation})


def _unknown_reservation(reservation_id):
    return EC2ClientError(
        "InvalidCapacityReservationId.NotFound",
        f"The capacity reservation ID '{reservation_id}' does not exist",
    )


def create_interruptible_capacity_reservation_allocation(self):
    source_id = self._get_param("CapacityReservationId")
    count = self._get_int_param("InstanceCount")
    reservations = _capacity_reservations(self.ec2_backend)
    source = reservations.get(source_id)
    if source is None:
        raise _unknown_reservation(source_id)
    if not count or count < 1 or count > source["AvailableInstanceCount"]:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"InstanceCount must be between 1 and the {source['AvailableInstanceCount']} available",
        )
    self.error_on_dryrun()
    source["AvailableInstanceCount"] -= count
    source["TotalInstanceCount"] -= count
    _new_capacity_reservation(
        self,
        source["InstanceType"],
        source["AvailabilityZone"],
        count,
        source["InstanceMatchCriteria"],
        _tags_of(self, "capacity-reservation"),
        Interruptible=True,
    )
    return ActionResult(
        {
            "SourceCapacityReservationId": source_id,
            "TargetInstanceCount": count,
            "Status": "active",
            "InterruptionType": "adhoc",
        }
    )


def _capacity_reservation_matches(reservation, name, values):
    fields = {
        "state": "State",
        "owner-id": "OwnerId",
        "instance-type": "InstanceType",
        "availability-zone": "AvailabilityZone",
        "instance-match-criteria": "InstanceMatchCriteria",
        "tenancy": "Tenancy",
    }
    if name in fields:
        return str(reservation[fields[name]]) in values
    if name == "tag-key":
        return any(tag["Key"] in values for tag in reservation["Tags"])
    if name.startswith("tag:"):
        key = name[len("tag:"):]
        return any(tag["Key"] == key and tag["Value"] in values for tag in reservation["Tags"])
    raise EC2ClientError(
        "InvalidParameterValue", f"The filter '{name}' is invalid for DescribeCapacityReservations"
    )


def describe_capacity_reservations(self):
    ids = self._get_param("CapacityReservationIds", [])
    filters = self._filters_from_querystring()
    reservations = _capacity_reservations(self.ec2_backend)
    for reservation_id in ids:
        if reservation_id not in reservations:
            raise _unknown_reservation(reservation_id)
    found = [reservations[i] for i in ids] if ids else list(reservations.values())
    for name, values in filters.items():
        found = [r for r in found if _capacity_reservation_matches(r, name, values)]
    return ActionResult({"CapacityReservations": found})


def patch_moto():
    fleets.Fleet.create_on_demand_requests = _with_template_security_groups(
        fleets.Fleet.create_on_demand_requests
    )
    fleets.Fleet.create_spot_requests = _with_template_security_groups(
        fleets.Fleet.create_spot_requests
    )
    EC2Response.create_placement_group = create_placement_group
    EC2Response.describe_placement_groups = describe_placement_groups
    EC2Response.delete_placement_group = delete_placement_group
    EC2Response.create_capacity_reservation = create_capacity_reservation
    EC2Response.create_interruptible_capacity_reservation_allocation = (
        create_interruptible_capacity_reservation_allocation
    )
    EC2Response.describe_capacity_reservations = describe_capacity_reservations


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="where to write the port once it listens")
    args = parser.parse_args()

    patch_moto()
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    _, port = server.get_host_and_port()

    if args.port_file:
        partial = args.port_file + ".partial"
        with open(partial, "w") as out:
            out.write(f"{port}\n")
        os.replace(partial, args.port_file)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
