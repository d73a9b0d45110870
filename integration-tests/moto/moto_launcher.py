#!/usr/bin/env python3
"""moto's server (EC2, IAM, SSM... on one port), started in this process with one emulator
gap fixed, for the end-to-end test (integration-tests/tests/e2e_aws_moto.rs).

The gap: moto's CreateFleet launches its instances without the security groups of their
launch template (it reads a `GroupSet` key that launch template data never has), where EC2
gives every instance the template's groups. Against stock moto every instance aws-plugin
launches looks SecurityGroupDrift-ed the moment it runs. The product is right; the emulator
is fixed here, before the server starts: each launch spec of a fleet that names no groups of
its own takes its template's `SecurityGroupIds`.

    moto_launcher.py --port-file PATH [--host 127.0.0.1] [--port 0]

Port 0 (the default) lets the kernel pick a free port, so nothing races for it; the port is
written to PATH (atomically: a reader never sees half a number) once the server accepts
connections. Serves until SIGTERM or SIGINT.
"""

import argparse
import os
import signal
import threading

from moto.ec2.models import fleets
from moto.server import ThreadedMotoServer


def _with_template_security_groups(create_requests):
    """Wraps Fleet.create_on_demand_requests / create_spot_requests: before they launch
    anything, a launch spec without groups gets those of its launch template version."""

    def wrapper(fleet, *args, **kwargs):
        for spec in fleet.launch_specs:
            template_spec = spec.launch_template_spec or {}
            if spec.group_set or "LaunchTemplateId" not in template_spec:
                continue
            template = fleet.ec2_backend.get_launch_template(template_spec["LaunchTemplateId"])
            version = template_spec.get("Version", template.default_version_number)
            data = template.get_version(version).data
            spec.group_set = list(data.get("SecurityGroupIds") or [])
        return create_requests(fleet, *args, **kwargs)

    return wrapper


def patch_moto():
    fleets.Fleet.create_on_demand_requests = _with_template_security_groups(
        fleets.Fleet.create_on_demand_requests
    )
    fleets.Fleet.create_spot_requests = _with_template_security_groups(
        fleets.Fleet.create_spot_requests
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()

    patch_moto()
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    _, port = server.get_host_and_port()

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
