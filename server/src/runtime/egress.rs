//! The network edge of a sandboxed editor: what `[network]` allows, as nftables rules in the
//! sandbox's own network namespace. `pasta` alone forwards whatever the editor sends to sockets
//! on this machine, so it would reach the company's networks, the cloud's metadata service and
//! this server's own services; the rules refuse those before a packet reaches pasta's tap device.
//!
//! Installed by the server into the namespace before pasta joins it, so the first packet that can
//! leave already meets them; the editor has no capability in that namespace (as root it runs as
//! an account of its own with none; otherwise bubblewrap drops them), so it can neither change
//! nor remove them. Where they cannot be installed pasta is not started: no egress, said in the
//! editor's log and on the session page, never open by accident.
//!
//! Order of the chain: loopback (the editor's own, and the product's port pasta forwards), the
//! neighbour discovery IPv6 needs, the ranges an admin allows, DNS to this machine's resolvers,
//! then the denied ranges and every address of this machine's interfaces (taken when the sandbox
//! is made). Refused packets get an ICMP error at once, so a program fails fast, not by timeout.
//! Nothing is written by hand at the netlink level: `nft` is nftables' own front end, so the rules
//! read as an admin would write them (`nft list ruleset` inside shows them).

use ipnet::IpNet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The table's name in each sandbox's namespace.
pub const TABLE: &str = "gpu_sandbox_edge";

/// What one sandbox may reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Edge {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    /// This machine's own addresses: refused unless allowed.
    pub own: Vec<IpAddr>,
    /// The resolvers DNS queries go to (port 53 only), even inside a denied range.
    pub resolvers: Vec<IpAddr>,
}

fn family(net: &IpNet) -> &'static str {
    match net {
        IpNet::V4(_) => "ip",
        IpNet::V6(_) => "ip6",
    }
}

impl Edge {
    /// The ruleset, for `nft -f -`: one table, for a namespace that has none yet (each sandbox's
    /// is new; replacing a table costs the kernel ~12 ms more, measured by `benches/edge.rs`).
    pub fn ruleset(&self) -> String {
        let mut rules = vec![
            "oifname \"lo\" accept".to_string(),
            "icmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } accept"
                .to_string(),
        ];
        for net in &self.allow {
            rules.push(format!("{} daddr {net} accept", family(net)));
        }
        for resolver in &self.resolvers {
            let net = IpNet::from(*resolver);
            rules.push(format!(
                "meta l4proto {{ tcp, udp }} th dport 53 {} daddr {net} accept",
                family(&net)
            ));
        }
        let own = self.own.iter().map(|a| IpNet::from(*a));
        for net in self.deny.iter().copied().chain(own) {
            rules.push(format!(
                "{} daddr {net} reject with icmpx type admin-prohibited",
                family(&net)
            ));
        }
        let mut text = format!(
            "table inet {TABLE} {{\n\tchain output {{\n\t\ttype filter hook output priority 0; policy accept;\n"
        );
        for rule in rules {
            text.push_str("\t\t");
            text.push_str(&rule);
            text.push('\n');
        }
        text.push_str("\t}\n}\n");
        text
    }
}

/// The nameservers of a `resolv.conf`.
pub fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| {
            let address = rest.trim().split(['%', ' ', '\t']).next()?;
            address.parse().ok()
        })
        .collect()
}

/// The resolvers a sandbox's DNS queries go to: those of `/etc/resolv.conf` (which the sandbox
/// reads too), and where it names only a local stub (systemd-resolved), the stub's upstreams.
pub fn host_resolvers() -> Vec<IpAddr> {
    let mut found = nameservers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    if found.iter().all(IpAddr::is_loopback) {
        found.extend(nameservers(
            &std::fs::read_to_string("/run/systemd/resolve/resolv.conf").unwrap_or_default(),
        ));
    }
    found.retain(|a| !a.is_loopback());
    found.dedup();
    found
}

/// Every address of this machine's interfaces, loopback's aside.
pub fn own_addresses() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we only read, then free once.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut entry = list;
        while !entry.is_null() {
            let address = (*entry).ifa_addr;
            if !address.is_null() {
                match i32::from((*address).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(address as *const libc::sockaddr_in);
                        found.push(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(address as *const libc::sockaddr_in6);
                        found.push(IpAddr::from(v6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            entry = (*entry).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found.retain(|a| !a.is_loopback());
    found.sort();
    found.dedup();
    found
}

/// Where nftables' front end is, if installed.
pub fn find_nft() -> Option<PathBuf> {
    super::sandbox::which("nft")
}

/// Loads `ruleset` into the network namespace of process `pid` (a sandbox's first process).
/// As root the namespace is joined directly; otherwise through the sandbox's user namespace,
/// which the server's account owns, keeping `CAP_NET_ADMIN` (ambient) across `nft`'s exec.
pub fn install(nft: &Path, pid: i32, root: bool, ruleset: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let open = |kind: &str| {
        std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))
            .map_err(|e| format!("the sandbox's {kind} namespace: {e}"))
    };
    let net = open("net")?;
    let user = if root { None } else { Some(open("user")?) };
    let mut command = std::process::Command::new(nft);
    command
        .args(["-f", "-"])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    {
        use std::os::fd::AsRawFd;
        let (net, user) = (net.as_raw_fd(), user.as_ref().map(AsRawFd::as_raw_fd));
        // SAFETY: between fork and exec only setns, capget/capset and prctl, async-signal-safe
        // system calls on descriptors opened before the fork.
        unsafe {
            command.pre_exec(move || {
                if let Some(user) = user {
                    if libc::setns(user, libc::CLONE_NEWUSER) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    keep_net_admin()?;
                }
                if libc::setns(net, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("{} did not run: {e}", nft.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset.as_bytes())
            .map_err(|e| format!("nft's input: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("nft did not finish: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nft refused the rules: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// After joining a user namespace (where this process now has every capability), keeps
/// `CAP_NET_ADMIN` through the next exec: inheritable, then ambient.
fn keep_net_admin() -> std::io::Result<()> {
    const CAP_NET_ADMIN: u32 = 12;
    const VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and the two data words that version uses.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        data[0].inheritable |= 1 << CAP_NET_ADMIN;
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            CAP_NET_ADMIN as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn the_chain_accepts_loopback_allowed_ranges_and_dns_before_it_refuses_the_rest() {
        let edge = Edge {
            allow: vec![net("10.9.0.0/16")],
            deny: vec![net("10.0.0.0/8"), net("fc00::/7")],
            own: vec!["192.0.2.2".parse().unwrap()],
            resolvers: vec!["10.255.255.53".parse().unwrap()],
        };
        let text = edge.ruleset();
        let order = [
            "oifname \"lo\" accept",
            "nd-neighbor-solicit",
            "ip daddr 10.9.0.0/16 accept",
            "th dport 53 ip daddr 10.255.255.53/32 accept",
            "ip daddr 10.0.0.0/8 reject",
            "ip6 daddr fc00::/7 reject",
            "ip daddr 192.0.2.2/32 reject",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|rule| {
                text.find(rule)
                    .unwrap_or_else(|| panic!("{rule} in {text}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(text.starts_with(&format!("table inet {TABLE} {{\n")));
        assert!(text.contains("hook output"), "{text}");
    }

    #[test]
    fn resolvers_are_read_as_glibc_reads_them() {
        let conf = "# comment\nsearch lan\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nnameserver  8.8.8.8 \noptions ndots:1\nnameserver bogus\n";
        assert_eq!(
            nameservers(conf),
            ["10.255.255.53", "fe80::1", "8.8.8.8"]
                .map(|a| a.parse::<IpAddr>().unwrap())
                .to_vec()
        );
    }

    #[test]
    fn this_machines_addresses_leave_loopback_out() {
        let own = own_addresses();
        assert!(own.iter().all(|a| !a.is_loopback()), "{own:?}");
    }
}
