//! Provider IDs: `aws:///<zone>/<instance id>`, what the kubelet puts on the Node and every
//! call after Create names an instance by.

use super::*;

/// `aws:///<zone>/<instance id>`, the provider ID the kubelet puts on the Node.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The zone and instance ID of a provider ID. Like upstream's parser it needs the zone:
/// `aws:///us-east-1a/i-0123456789abcdef0`.
pub fn parse_provider_id(provider_id: &str) -> Result<(String, String), InstanceError> {
    let invalid = |why: &str| {
        InstanceError::invalid(
            "provider_id",
            format!("{provider_id:?} is not aws:///<zone>/<instance id>: {why}"),
        )
    };
    let rest = provider_id
        .strip_prefix("aws:///")
        .ok_or_else(|| invalid("it does not start with aws:///"))?;
    let (zone, id) = rest
        .split_once('/')
        .ok_or_else(|| invalid("it has no zone"))?;
    if zone.is_empty() {
        return Err(invalid("the zone is empty"));
    }
    if !is_instance_id(id) {
        return Err(invalid(
            "the instance ID is not i- followed by hexadecimal digits",
        ));
    }
    Ok((zone.to_owned(), id.to_owned()))
}

pub(super) fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        !hex.is_empty()
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}
