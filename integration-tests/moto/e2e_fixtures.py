#!/usr/bin/env python3
"""The AWS side of the end-to-end tests (integration-tests/tests/e2e_aws_moto.rs and
conformance.rs), with boto3 against the moto server at --endpoint. Every command prints one
JSON object on stdout.

    e2e_fixtures.py --endpoint URL setup --discovery VALUE --role ROLE --image-name NAME
                    [--arm64-image-name NAME]
        A VPC with one subnet in each of us-east-1a and us-east-1b and a security group, all
        tagged karpenter.sh/discovery=VALUE; the IAM role ROLE (aws-plugin creates the instance
        profile for it); an x86_64 image NAME of this account, and an arm64 one if asked.
        -> {"subnets": {ZONE: ID}, "securityGroup": ID, "image": ID, "imageCreationDate": DATE}

    e2e_fixtures.py --endpoint URL publish-image --name NAME --after DATE
        A newer image NAME, dated strictly after DATE (the newest for an image selector).
        -> {"image": ID, "creationDate": DATE}

    e2e_fixtures.py --endpoint URL instances --cluster NAME
        The instances tagged kubernetes.io/cluster/NAME, in any state.
        -> {"instances": [{"id", "state", "image", "securityGroups", "nodeClaim", "zone"}]}

    e2e_fixtures.py --endpoint URL create-queue --name NAME
        The SQS queue NAME, as deploy/interruption-queue.yaml makes it (EventBridge's target).
        -> {"queueUrl": URL}

    e2e_fixtures.py --endpoint URL spot-warning --queue NAME --instance ID
        An "EC2 Spot Instance Interruption Warning" for instance ID on the queue, in the shape
        EventBridge delivers it.
        -> {"messageId": ID, "eventId": ID}

    e2e_fixtures.py --endpoint URL queue-depth --queue NAME
        The messages on the queue, visible or in flight (received, not deleted).
        -> {"messages": N}

Credentials and region are fixed (moto accepts any); nothing is read from the environment.
"""

import argparse
import json
import time

import boto3

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
DISCOVERY_KEY = "karpenter.sh/discovery"
# IAM needs a trust policy to create a role; nothing reads it.
ASSUME_ROLE_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


def client(service, endpoint):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def tags(resource_type, discovery):
    return [
        {
            "ResourceType": resource_type,
            "Tags": [{"Key": DISCOVERY_KEY, "Value": discovery}],
        }
    ]


def register_image(ec2, name, architecture="x86_64"):
    """A Linux image of this account for ARCHITECTURE. moto's RegisterImage leaves the
    architecture out (no node runs such an image), CopyImage keeps the source's: so copy one
    of the images moto ships."""
    shipped = ec2.describe_images(
        Owners=["amazon"], Filters=[{"Name": "architecture", "Values": [architecture]}]
    )["Images"]
    source = min(i["ImageId"] for i in shipped if not i.get("Platform"))
    return ec2.copy_image(SourceImageId=source, SourceRegion=REGION, Name=name)["ImageId"]


def creation_date(ec2, image_id):
    return ec2.describe_images(ImageIds=[image_id])["Images"][0]["CreationDate"]


def setup(args):
    ec2 = client("ec2", args.endpoint)
    iam = client("iam", args.endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.88.0.0/16")["Vpc"]["VpcId"]
    subnets = {}
    for index, zone in enumerate(ZONES):
        subnet = ec2.create_subnet(
            VpcId=vpc,
            CidrBlock=f"10.88.{index + 1}.0/24",
            AvailabilityZone=zone,
            TagSpecifications=tags("subnet", args.discovery),
        )
        subnets[zone] = subnet["Subnet"]["SubnetId"]
    group = ec2.create_security_group(
        GroupName="e2e-nodes",
        Description="nodes of the end-to-end test",
        VpcId=vpc,
        TagSpecifications=tags("security-group", args.discovery),
    )["GroupId"]
    iam.create_role(RoleName=args.role, AssumeRolePolicyDocument=ASSUME_ROLE_POLICY)
    image = register_image(ec2, args.image_name)
    if args.arm64_image_name:
        register_image(ec2, args.arm64_image_name, "arm64")
    return {
        "subnets": subnets,
        "securityGroup": group,
        "image": image,
        "imageCreationDate": creation_date(ec2, image),
    }


def publish_image(args):
    """moto dates images to the second, on the real clock: an image registered in the same
    second as the one it should replace would tie with it, and "the newest" would be either.
    So register until moto's clock has moved past DATE (at most a few seconds)."""
    ec2 = client("ec2", args.endpoint)
    deadline = time.monotonic() + 10
    while True:
        image = register_image(ec2, args.name)
        date = creation_date(ec2, image)
        if date > args.after:
            return {"image": image, "creationDate": date}
        ec2.deregister_image(ImageId=image)
        if time.monotonic() > deadline:
            raise SystemExit(f"moto dated every image {args.name} at or before {args.after}")
        time.sleep(0.2)


def instances(args):
    ec2 = client("ec2", args.endpoint)
    found = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:kubernetes.io/cluster/{args.cluster}", "Values": ["owned"]}]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                instance_tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                found.append(
                    {
                        "id": instance["InstanceId"],
                        "state": instance["State"]["Name"],
                        "image": instance.get("ImageId"),
                        "securityGroups": sorted(
                            g["GroupId"] for g in instance.get("SecurityGroups", [])
                        ),
                        "nodeClaim": instance_tags.get("karpenter.sh/nodeclaim"),
                        "zone": instance.get("Placement", {}).get("AvailabilityZone"),
                    }
                )
    return {"instances": sorted(found, key=lambda i: i["id"])}


def create_queue(args):
    sqs = client("sqs", args.endpoint)
    return {"queueUrl": sqs.create_queue(QueueName=args.name)["QueueUrl"]}


def spot_warning(args):
    sqs = client("sqs", args.endpoint)
    url = sqs.get_queue_url(QueueName=args.queue)["QueueUrl"]
    event_id = f"e2e-{args.instance}"
    body = {
        "version": "0",
        "id": event_id,
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:instance/{args.instance}"],
        "detail": {"instance-id": args.instance, "instance-action": "terminate"},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))
    return {"messageId": sent["MessageId"], "eventId": event_id}


def queue_depth(args):
    sqs = client("sqs", args.endpoint)
    url = sqs.get_queue_url(QueueName=args.queue)["QueueUrl"]
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return {
        "messages": int(attributes["ApproximateNumberOfMessages"])
        + int(attributes["ApproximateNumberOfMessagesNotVisible"])
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("setup")
    p.add_argument("--discovery", required=True)
    p.add_argument("--role", required=True)
    p.add_argument("--image-name", required=True)
    p.add_argument("--arm64-image-name", help="also an arm64 image of this name")
    p.set_defaults(run=setup)
    p = commands.add_parser("publish-image")
    p.add_argument("--name", required=True)
    p.add_argument("--after", required=True)
    p.set_defaults(run=publish_image)
    p = commands.add_parser("instances")
    p.add_argument("--cluster", required=True)
    p.set_defaults(run=instances)
    p = commands.add_parser("create-queue")
    p.add_argument("--name", required=True)
    p.set_defaults(run=create_queue)
    p = commands.add_parser("spot-warning")
    p.add_argument("--queue", required=True)
    p.add_argument("--instance", required=True)
    p.set_defaults(run=spot_warning)
    p = commands.add_parser("queue-depth")
    p.add_argument("--queue", required=True)
    p.set_defaults(run=queue_depth)
    args = parser.parse_args()
    print(json.dumps(args.run(args)))


if __name__ == "__main__":
    main()
