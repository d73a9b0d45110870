//! AL2: the node class's parts, then a script calling the EKS AMI's `/etc/eks/bootstrap.sh`
//! (upstream `eksbootstrap.go`).

use std::net::IpAddr;

use super::mime::{self, Part, SHELL_SCRIPT};
use super::{Bootstrap, BootstrapError, shell_quote};

pub(super) fn script(input: &Bootstrap<'_>) -> Result<String, BootstrapError> {
    let mut parts = match input.custom_user_data() {
        None => Vec::new(),
        Some(user_data) if mime::is_archive(user_data) => {
            mime::parse(user_data).map_err(|reason| BootstrapError::InvalidMime {
                family: input.family.as_str(),
                reason,
            })?
        }
        Some(user_data) => vec![Part::new(SHELL_SCRIPT, user_data)],
    };
    parts.push(Part::new(SHELL_SCRIPT, bootstrap_script(input)));
    mime::serialize(&parts)
}

fn bootstrap_script(input: &Bootstrap<'_>) -> String {
    let mut script = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    // bootstrap.sh does not read `--flag=value`: flags and values are separate words.
    script.push_str(&format!(
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {}",
        shell_quote(&input.cluster.name),
        shell_quote(&input.cluster.endpoint)
    ));
    if let Some(ca) = input.ca_bundle() {
        script.push_str(&format!(" --b64-cluster-ca {}", shell_quote(ca)));
    }
    let dns = input.cluster_dns().first();
    if dns.is_some_and(|ip| is_ipv6(ip)) {
        script.push_str(" \\\n--ip-family ipv6");
    }
    if let Some(ip) = dns {
        script.push_str(&format!(" \\\n--dns-cluster-ip {}", shell_quote(ip)));
    }
    if input.max_pods().is_some() {
        // Otherwise bootstrap.sh computes its own from the ENI limits and overrides ours.
        script.push_str(" \\\n--use-max-pods false");
    }
    let args = input.kubelet_extra_args();
    if !args.is_empty() {
        script.push_str(&format!(
            " \\\n--kubelet-extra-args {}",
            shell_quote(&args.join(" "))
        ));
    }
    script
}

/// Upstream's test: anything that is not an IPv4 address (IPv4-mapped IPv6 included) is IPv6.
fn is_ipv6(ip: &str) -> bool {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => false,
        Ok(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
        Err(_) => true,
    }
}
