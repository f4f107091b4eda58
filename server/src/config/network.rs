//! `[network]`: what editors reach, on either runtime. The world is open (people install packages
//! and pull models), but never the ranges below: the company's networks, the cloud's metadata and
//! host agents, the GPU server's own services. One setting for both runtimes: the local runtime
//! turns it into nftables rules in each sandbox's network namespace (`runtime::egress`), the kube
//! runtime into each user namespace's NetworkPolicy.

use super::InvalidKey;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Ranges (CIDR, IPv4 or IPv6) an editor never reaches. On one server, every address of the
    /// server's own interfaces is refused as well.
    pub egress_deny: Vec<String>,
    /// Ranges an editor reaches even so: an internal package mirror, a shared file server. They
    /// win over the deny list and over the server's own addresses.
    pub egress_allow: Vec<String>,
}

/// The default of `network.egress_deny`: "this network" and loopback, private ranges (RFC 1918,
/// unique local IPv6), carrier-grade NAT, link-local (every cloud's metadata service at
/// 169.254.169.254 and AWS's fd00:ec2::254), IETF protocol assignments, benchmarking, multicast
/// and reserved space, NAT64 (a way back into private IPv4), IPv4-mapped IPv6, and Azure's
/// WireServer, which hands out node credentials from a public address.
pub const DEFAULT_EGRESS_DENY: [&str; 21] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "168.63.129.16/32",
    "::/128",
    "::1/128",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
];

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            egress_deny: DEFAULT_EGRESS_DENY.iter().map(|s| s.to_string()).collect(),
            egress_allow: Vec::new(),
        }
    }
}

/// `a.b.c.d/n` or `x:y::/n` with nothing set below the prefix, or a bare address (one host).
pub fn parse_range(s: &str) -> Result<IpNet, String> {
    let shown = app::domain::encode::shown(s);
    let net = match s.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => match s.parse::<std::net::IpAddr>() {
            Ok(address) => IpNet::from(address),
            Err(_) => {
                return Err(format!(
                    "{shown} is not an address range (CIDR) like 10.0.0.0/8 or fc00::/7"
                ));
            }
        },
    };
    if net.trunc() != net {
        return Err(format!(
            "{shown} has bits set below its prefix: did you mean {}?",
            net.trunc()
        ));
    }
    Ok(net)
}

impl NetworkConfig {
    /// Checks what serde cannot; the error names the full key (`network.egress_deny`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        match self.problem() {
            Some((key, why)) => Err(InvalidKey::new(format!("network.{key}"), why)),
            None => Ok(()),
        }
    }

    /// The first key that is wrong, and why.
    pub fn problem(&self) -> Option<(String, String)> {
        for (key, list) in [
            ("egress_deny", &self.egress_deny),
            ("egress_allow", &self.egress_allow),
        ] {
            if let Some(why) = list.iter().find_map(|s| parse_range(s).err()) {
                return Some((key.to_string(), why));
            }
        }
        // A NetworkPolicy can only carve ranges out of the world, never the world itself.
        if let Some(all) = self.deny().iter().find(|net| net.prefix_len() == 0) {
            return Some((
                "egress_deny".into(),
                format!(
                    "{all} is every address: for editors without a network set local.network = \"none\""
                ),
            ));
        }
        None
    }

    /// The deny list, parsed (validated at load).
    pub fn deny(&self) -> Vec<IpNet> {
        self.egress_deny
            .iter()
            .filter_map(|s| parse_range(s).ok())
            .collect()
    }

    /// The allow list, parsed (validated at load).
    pub fn allow(&self) -> Vec<IpNet> {
        self.egress_allow
            .iter()
            .filter_map(|s| parse_range(s).ok())
            .collect()
    }

    /// What an editor reaches, in words, for the settings page and the session page.
    pub fn describe(&self) -> String {
        let mut words = if self.egress_deny.is_empty() {
            "the internet and every network this server reaches (network.egress_deny is empty)"
                .to_string()
        } else if self.egress_deny == NetworkConfig::default().egress_deny {
            "the internet; never private networks, cloud metadata services or this server's own \
             addresses"
                .to_string()
        } else {
            format!(
                "the internet; never {} or this server's own addresses",
                self.egress_deny.join(", ")
            )
        };
        if !self.egress_allow.is_empty() {
            words.push_str(&format!(
                "; allowed all the same: {}",
                self.egress_allow.join(", ")
            ));
        }
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_cover_both_families() {
        let config = NetworkConfig::default();
        assert_eq!(config.problem(), None);
        let deny = config.deny();
        assert_eq!(deny.len(), DEFAULT_EGRESS_DENY.len());
        let covers = |address: &str| {
            let address: std::net::IpAddr = address.parse().unwrap();
            deny.iter().any(|net| net.contains(&address))
        };
        for address in [
            "169.254.169.254",
            "fd00:ec2::254",
            "168.63.129.16",
            "10.1.2.3",
            "172.31.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "fe80::1",
            "fd12::1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "127.0.0.1",
        ] {
            assert!(covers(address), "{address} is denied by default");
        }
        for address in ["203.0.113.80", "8.8.8.8", "2001:db8::1", "2606:4700::1111"] {
            assert!(!covers(address), "{address} is the open internet");
        }
    }

    #[test]
    fn a_bad_range_names_its_key_and_what_was_meant() {
        let with = |deny: &[&str], allow: &[&str]| {
            NetworkConfig {
                egress_deny: deny.iter().map(|s| s.to_string()).collect(),
                egress_allow: allow.iter().map(|s| s.to_string()).collect(),
            }
            .problem()
        };
        assert_eq!(with(&["10.0.0.0/8", "fd00::/8"], &["10.9.0.0/16"]), None);
        let (key, why) = with(&["10.0.0.1/8"], &[]).unwrap();
        assert_eq!(key, "egress_deny");
        assert!(why.contains("did you mean 10.0.0.0/8"), "{why}");
        let (key, why) = with(&[], &["mirror.internal"]).unwrap();
        assert_eq!(key, "egress_allow");
        assert!(why.contains("not an address range"), "{why}");
        assert_eq!(with(&["10.0.0.0/33"], &[]).unwrap().0, "egress_deny");
        assert!(with(&["::/0"], &[]).unwrap().1.contains("local.network"));
        assert_eq!(
            parse_range("10.2.3.4").unwrap().to_string(),
            "10.2.3.4/32",
            "a bare address is one host"
        );
    }

    #[test]
    fn the_words_say_what_is_reached() {
        let mut config = NetworkConfig::default();
        assert!(config.describe().contains("never private networks"));
        config.egress_allow = vec!["10.9.0.0/16".into()];
        assert!(
            config
                .describe()
                .ends_with("allowed all the same: 10.9.0.0/16")
        );
        config.egress_deny.clear();
        assert!(
            config
                .describe()
                .contains("every network this server reaches")
        );
    }
}
