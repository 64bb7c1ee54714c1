//! Which IP addresses the proxy refuses to connect to unless the profile names them: everything
//! that is not ordinary global unicast (loopback, private, link-local with cloud metadata, CGNAT,
//! multicast, documentation and reserved ranges, and IPv6 forms that embed such an IPv4 address).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Why an address is special. The proxy names it in the 403 body and the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialRange {
    Unspecified,
    ThisNetwork,
    Loopback,
    Private,
    SharedCgnat,
    LinkLocal,
    ProtocolAssignments,
    Documentation,
    Benchmarking,
    Multicast,
    Broadcast,
    Reserved,
    UniqueLocal,
    SiteLocal,
    Discard,
    /// NAT64, 6to4, Teredo, IPv4-compatible: forms that reach an IPv4 address through a
    /// translator, so the IPv6 address alone says nothing about where the packets end up.
    Translated,
}

impl fmt::Display for SpecialRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpecialRange::Unspecified => "unspecified",
            SpecialRange::ThisNetwork => "this-network 0.0.0.0/8",
            SpecialRange::Loopback => "loopback",
            SpecialRange::Private => "private",
            SpecialRange::SharedCgnat => "shared/CGNAT 100.64.0.0/10",
            SpecialRange::LinkLocal => "link-local (includes cloud metadata)",
            SpecialRange::ProtocolAssignments => "IETF protocol assignments",
            SpecialRange::Documentation => "documentation",
            SpecialRange::Benchmarking => "benchmarking 198.18.0.0/15",
            SpecialRange::Multicast => "multicast",
            SpecialRange::Broadcast => "broadcast",
            SpecialRange::Reserved => "reserved",
            SpecialRange::UniqueLocal => "unique-local fc00::/7",
            SpecialRange::SiteLocal => "site-local fec0::/10",
            SpecialRange::Discard => "discard-only 100::/64",
            SpecialRange::Translated => "IPv4 translation (NAT64/6to4/Teredo/IPv4-compatible)",
        })
    }
}

/// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) stands for; everything else
/// unchanged. Mapped addresses reach the IPv4 host, so they are judged (and allowed) as it.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// `None` for ordinary global unicast; otherwise the special range the address is in.
pub fn classify(ip: IpAddr) -> Option<SpecialRange> {
    match canonical(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<SpecialRange> {
    use SpecialRange::*;
    const TABLE: &[(Ipv4Addr, u8, SpecialRange)] = &[
        (Ipv4Addr::new(255, 255, 255, 255), 32, Broadcast),
        (Ipv4Addr::new(0, 0, 0, 0), 32, Unspecified),
        (Ipv4Addr::new(0, 0, 0, 0), 8, ThisNetwork),
        (Ipv4Addr::new(10, 0, 0, 0), 8, Private),
        (Ipv4Addr::new(100, 64, 0, 0), 10, SharedCgnat),
        (Ipv4Addr::new(127, 0, 0, 0), 8, Loopback),
        (Ipv4Addr::new(169, 254, 0, 0), 16, LinkLocal),
        (Ipv4Addr::new(172, 16, 0, 0), 12, Private),
        (Ipv4Addr::new(192, 0, 0, 0), 24, ProtocolAssignments),
        (Ipv4Addr::new(192, 0, 2, 0), 24, Documentation),
        (Ipv4Addr::new(192, 88, 99, 0), 24, Reserved),
        (Ipv4Addr::new(192, 168, 0, 0), 16, Private),
        (Ipv4Addr::new(198, 18, 0, 0), 15, Benchmarking),
        (Ipv4Addr::new(198, 51, 100, 0), 24, Documentation),
        (Ipv4Addr::new(203, 0, 113, 0), 24, Documentation),
        (Ipv4Addr::new(224, 0, 0, 0), 4, Multicast),
        (Ipv4Addr::new(240, 0, 0, 0), 4, Reserved),
    ];
    TABLE
        .iter()
        .find(|(net, len, _)| v4_in(ip, *net, *len))
        .map(|(_, _, range)| *range)
}

fn classify_v6(ip: Ipv6Addr) -> Option<SpecialRange> {
    use SpecialRange::*;
    if ip.is_unspecified() {
        return Some(Unspecified);
    }
    if ip.is_loopback() {
        return Some(Loopback);
    }
    const TABLE: &[(Ipv6Addr, u8, SpecialRange)] = &[
        // ::/96 (IPv4-compatible, deprecated); ::ffff:0:0/96 was mapped to IPv4 before.
        (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96, Translated),
        (
            Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
            96,
            Translated,
        ),
        (
            Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
            48,
            Translated,
        ),
        (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, Discard),
        (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, Translated),
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
            32,
            Documentation,
        ),
        (
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
            23,
            ProtocolAssignments,
        ),
        (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, Translated),
        (
            Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
            20,
            Documentation,
        ),
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, UniqueLocal),
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, LinkLocal),
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, SiteLocal),
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Multicast),
    ];
    if let Some((_, _, range)) = TABLE.iter().find(|(net, len, _)| v6_in(ip, *net, *len)) {
        return Some(*range);
    }
    // Only 2000::/3 is allocated as global unicast; everything else is reserved.
    if !v6_in(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        return Some(Reserved);
    }
    None
}

fn v4_in(ip: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

fn v6_in(ip: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

/// An `allow_addresses` entry: one address or a CIDR block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => v4_in(ip, net, self.len),
            (IpAddr::V6(net), IpAddr::V6(ip)) => v6_in(ip, net, self.len),
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let addr = addr
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr);
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IP address"))?;
        let net = canonical(net);
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            // Plain decimal only: `u8::from_str` would also take "+8" and "08".
            Some(len)
                if !len.is_empty()
                    && len.bytes().all(|b| b.is_ascii_digit())
                    && (len == "0" || !len.starts_with('0')) =>
            {
                match len.parse::<u8>() {
                    Ok(len) if len <= max => len,
                    _ => return Err(format!("prefix length must be 0..={max}")),
                }
            }
            Some(_) => return Err(format!("prefix length must be 0..={max}")),
        };
        Ok(Cidr { net, len })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifier_table() {
        use SpecialRange::*;
        let cases: &[(&str, Option<SpecialRange>)] = &[
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("160.79.104.10", None),
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(ThisNetwork)),
            ("10.1.2.3", Some(Private)),
            ("100.64.0.1", Some(SharedCgnat)),
            ("100.127.255.255", Some(SharedCgnat)),
            ("100.128.0.1", None),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("169.254.169.254", Some(LinkLocal)),
            ("172.15.255.255", None),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.0", None),
            ("192.0.0.8", Some(ProtocolAssignments)),
            ("192.0.2.1", Some(Documentation)),
            ("192.88.99.1", Some(Reserved)),
            ("192.168.1.1", Some(Private)),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("198.51.100.7", Some(Documentation)),
            ("203.0.113.9", Some(Documentation)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("255.255.255.255", Some(Broadcast)),
            ("2606:4700::1111", None),
            ("2a00:1450::1", None),
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::ffff:1.1.1.1", None),
            ("::127.0.0.1", Some(Translated)),
            ("64:ff9b::a9fe:a9fe", Some(Translated)),
            ("64:ff9b:1::1", Some(Translated)),
            ("100::1", Some(Discard)),
            ("2001::1", Some(Translated)),
            ("2001:db8::1", Some(Documentation)),
            ("2001:2::1", Some(ProtocolAssignments)),
            ("2002:7f00:1::1", Some(Translated)),
            ("3fff::1", Some(Documentation)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fec0::1", Some(SiteLocal)),
            ("ff02::1", Some(Multicast)),
            ("4000::1", Some(Reserved)),
            ("fd00:ec2::254", Some(UniqueLocal)),
        ];
        for (addr, want) in cases {
            let ip: IpAddr = addr.parse().unwrap();
            assert_eq!(classify(ip), *want, "{addr}");
        }
    }

    #[test]
    fn cidr_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("127.0.0.1", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.2", false),
            ("127.0.0.1", "::ffff:127.0.0.1", true),
            ("10.0.0.0/8", "10.255.1.1", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("::1", "::1", true),
            ("[::1]", "::1", true),
            ("fd00::/8", "fd12::1", true),
            ("fd00::/8", "fc00::1", false),
            ("::ffff:127.0.0.1", "127.0.0.1", true),
            ("0.0.0.0/0", "8.8.8.8", true),
            ("0.0.0.0/0", "::1", false),
        ];
        for (cidr, ip, want) in cases {
            let c: Cidr = cidr.parse().unwrap();
            assert_eq!(c.contains(ip.parse().unwrap()), *want, "{cidr} ∋ {ip}");
        }
        for bad in [
            "",
            "localhost",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/08",
            "1.2.3",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
