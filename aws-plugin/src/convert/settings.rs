//! The `aws.*` keys of the old global settings ConfigMap (`karpenter-global-settings`, removed
//! in v1beta1: "global settings moved into the node class" or onto the controller's flags),
//! each explained with where it went. Keys without the `aws.` prefix are core's, which core
//! explains.

use serde_json::{Map, Value};

use super::Notes;

/// Where each `aws.*` setting went (upstream v0.32's `pkg/apis/settings/settings.go` lists
/// them), and what this plugin does with it.
const DESTINATIONS: [(&str, &str); 13] = [
    (
        "aws.clusterName",
        "now aws-plugin's --cluster-name (CLUSTER_NAME)",
    ),
    (
        "aws.clusterEndpoint",
        "now aws-plugin's --cluster-endpoint (CLUSTER_ENDPOINT)",
    ),
    (
        "aws.clusterCABundle",
        "now aws-plugin's --cluster-ca-bundle (CLUSTER_CA_BUNDLE)",
    ),
    (
        "aws.defaultInstanceProfile",
        "moved into the node class: set as spec.instanceProfile of every converted \
         AWSNodeTemplate that named none",
    ),
    (
        "aws.tags",
        "moved into the node class: merged into spec.tags of every converted AWSNodeTemplate \
         (the class's own tags win)",
    ),
    (
        "aws.interruptionQueueName",
        "interruption handling is not in this plugin yet: nothing reads the queue",
    ),
    (
        "aws.vmMemoryOverheadPercent",
        "this plugin always subtracts 7.5% (upstream's default); another value cannot be set",
    ),
    (
        "aws.reservedENIs",
        "this plugin reserves no ENIs when computing pod density; another value cannot be set",
    ),
    (
        "aws.enablePodENI",
        "this plugin does not report vpc.amazonaws.com/pod-eni capacity (security groups for \
         pods) yet",
    ),
    (
        "aws.enableENILimitedPodDensity",
        "removed in v1beta1: pod density is ENI-limited unless the node class sets \
         spec.kubelet.maxPods (or podsPerCore); set those where it was false",
    ),
    (
        "aws.isolatedVPC",
        "this plugin reads prices from its embedded catalogue and never calls the pricing API, \
         as an isolated VPC needs",
    ),
    (
        "aws.assumeRoleARN",
        "use the standard AWS settings of aws-plugin's container (AWS_ROLE_ARN with a web \
         identity token, or a profile)",
    ),
    (
        "aws.assumeRoleDuration",
        "use the standard AWS settings of aws-plugin's container",
    ),
];

/// One warning per `aws.*` key of the ConfigMap's data, saying where it went.
pub fn explain(config_map: &Map<String, Value>, notes: &mut Notes) {
    let Some(Value::Object(data)) = config_map.get("data") else {
        return;
    };
    for (key, value) in data.iter().filter(|(key, _)| key.starts_with("aws.")) {
        let path = format!("data.{key}");
        let destination = DESTINATIONS
            .iter()
            .find(|(setting, _)| setting == key)
            .map(|(_, destination)| *destination);
        match destination {
            Some(destination) => notes.warn(path, destination.to_owned()),
            None => notes.warn(path, "not a setting this plugin knows: ignored"),
        }
        if key == "aws.tags"
            && serde_json::from_str::<Map<String, Value>>(value.as_str().unwrap_or_default())
                .is_err()
        {
            notes.warn(
                format!("data.{key}"),
                "not a JSON object of tag keys to values: not applied to any node class",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::object;
    use super::*;

    /// "Global settings moved into the node class" or onto the flags: every `aws.*` key is
    /// said; core's keys are core's to say.
    #[test]
    fn every_aws_setting_is_explained() {
        let config_map = object(json!({"data": {
            "aws.clusterName": "demo", "aws.tags": "not json", "aws.madeUp": "1",
            "batchMaxDuration": "10s",
        }}));
        let mut notes = Notes::default();
        explain(&config_map, &mut notes);
        let said: Vec<(&str, &str)> = notes
            .warnings
            .iter()
            .map(|w| (w.path.as_str(), w.message.as_str()))
            .collect();
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(said[0].1.contains("--cluster-name"));
        assert!(said[1].1.contains("not a setting"));
        assert!(said[3].1.contains("not a JSON object"));
    }
}
