//! Windows: one `<powershell>` block, the node class's script first, then the EKS AMI's
//! `Start-EKSBootstrap.ps1` (upstream `windows.go`).

use super::{Bootstrap, powershell_quote};

pub(super) fn script(input: &Bootstrap<'_>) -> String {
    let mut script = String::from("<powershell>\n");
    if let Some(user_data) = input.custom_user_data() {
        script.push_str(user_data);
        if !user_data.ends_with('\n') {
            script.push('\n');
        }
    }
    script.push_str(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
    );
    script.push_str(&format!(
        "& $EKSBootstrapScriptFile -EKSClusterName {} -APIServerEndpoint {}",
        powershell_quote(&input.cluster.name),
        powershell_quote(&input.cluster.endpoint)
    ));
    if let Some(ca) = input.ca_bundle() {
        script.push_str(&format!(" -Base64ClusterCA {}", powershell_quote(ca)));
    }
    let args = input.kubelet_extra_args();
    if !args.is_empty() {
        script.push_str(&format!(
            " -KubeletExtraArgs {}",
            powershell_quote(&args.join(" "))
        ));
    }
    if let Some(ip) = input.cluster_dns().first() {
        script.push_str(&format!(" -DNSClusterIP {}", powershell_quote(ip)));
    }
    script.push_str("\n</powershell>");
    script
}
