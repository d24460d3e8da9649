//! Packet parsing, the log line and de-duplication: everything that needs no root.

use std::net::IpAddr;
use std::time::{Duration, UNIX_EPOCH};

use secperf_nfq::packet::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use secperf_nfq::timefmt::rfc3339;
use secperf_nfq::{parse_five_tuple, ConnLog, FiveTuple, LogLine, ParseError, SeenSet};

fn v4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8], frag_offset: u16) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    let total = (20 + l4.len()) as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[6..8].copy_from_slice(&frag_offset.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(l4);
    p
}

fn ports(sport: u16, dport: u16) -> Vec<u8> {
    let mut l4 = sport.to_be_bytes().to_vec();
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&[0u8; 16]);
    l4
}

fn v6(next: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    let len = (ext.len() + l4.len()) as u16;
    p[4..6].copy_from_slice(&len.to_be_bytes());
    p[6] = next;
    p[7] = 64;
    let src: IpAddr = "2001:2:0:1::2".parse().unwrap();
    let dst: IpAddr = "2001:2:0:2::2".parse().unwrap();
    if let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) {
        p[8..24].copy_from_slice(&s.octets());
        p[24..40].copy_from_slice(&d.octets());
    }
    p.extend_from_slice(ext);
    p.extend_from_slice(l4);
    p
}

#[test]
fn ipv4_tcp_five_tuple() {
    let pkt = v4(
        PROTO_TCP,
        [198, 18, 1, 2],
        [198, 18, 2, 2],
        &ports(40000, 5201),
        0,
    );
    let t = parse_five_tuple(&pkt).unwrap();
    assert_eq!(t.src.to_string(), "198.18.1.2");
    assert_eq!(t.dst.to_string(), "198.18.2.2");
    assert_eq!(
        (t.proto, t.sport, t.dport),
        (PROTO_TCP, Some(40000), Some(5201))
    );
    assert_eq!(t.to_string(), "tcp 198.18.1.2:40000 -> 198.18.2.2:5201");
}

#[test]
fn ipv4_options_shift_the_ports() {
    let mut pkt = v4(PROTO_UDP, [198, 18, 1, 2], [198, 18, 2, 2], &[], 0);
    pkt[0] = 0x46; // 24-byte header: 4 bytes of options
    pkt.extend_from_slice(&[1, 1, 1, 1]); // NOP options
    pkt.extend_from_slice(&ports(1234, 53));
    let t = parse_five_tuple(&pkt).unwrap();
    assert_eq!((t.sport, t.dport), (Some(1234), Some(53)));
}

#[test]
fn ipv4_later_fragment_has_no_ports() {
    let pkt = v4(
        PROTO_UDP,
        [198, 18, 1, 2],
        [198, 18, 2, 2],
        &ports(1, 2),
        185,
    );
    let t = parse_five_tuple(&pkt).unwrap();
    assert_eq!((t.sport, t.dport), (None, None));
}

#[test]
fn icmp_has_no_ports() {
    let pkt = v4(
        PROTO_ICMP,
        [198, 18, 1, 2],
        [198, 18, 2, 2],
        &[8, 0, 0, 0],
        0,
    );
    let t = parse_five_tuple(&pkt).unwrap();
    assert_eq!(t.proto_name(), "icmp");
    assert_eq!(t.sport, None);
}

#[test]
fn ipv6_udp_through_extension_headers() {
    // hop-by-hop (8 bytes) then a first fragment (offset 0), then UDP
    let mut ext = vec![44u8, 0, 1, 4, 0, 0, 0, 0]; // hbh: next = fragment, len 0 -> 8 bytes
    ext.extend_from_slice(&[PROTO_UDP, 0, 0, 0, 0, 0, 0, 1]); // fragment: next = udp, offset 0
    let pkt = v6(0, &ext, &ports(5000, 5301));
    let t = parse_five_tuple(&pkt).unwrap();
    assert_eq!(t.family(), 6);
    assert_eq!(t.src.to_string(), "2001:2:0:1::2");
    assert_eq!(
        (t.proto, t.sport, t.dport),
        (PROTO_UDP, Some(5000), Some(5301))
    );
    assert_eq!(
        t.to_string(),
        "udp [2001:2:0:1::2]:5000 -> [2001:2:0:2::2]:5301"
    );
}

#[test]
fn ipv6_later_fragment_has_no_ports() {
    let ext = [PROTO_TCP, 0, 0x05, 0x00, 0, 0, 0, 1]; // offset 160 (in 8-byte units: 0x0500 >> 3)
    let pkt = v6(44, &ext, &ports(1, 2));
    let t = parse_five_tuple(&pkt).unwrap();
    assert_eq!((t.proto, t.sport), (PROTO_TCP, None));
}

#[test]
fn bad_packets_are_errors_not_panics() {
    assert_eq!(parse_five_tuple(&[]), Err(ParseError::Empty));
    assert_eq!(parse_five_tuple(&[0x50; 40]), Err(ParseError::Version(5)));
    assert!(matches!(
        parse_five_tuple(&[0x45; 10]),
        Err(ParseError::Truncated { need: 20, .. })
    ));
    let mut short_tcp = v4(PROTO_TCP, [1, 1, 1, 1], [2, 2, 2, 2], &[0, 1], 0);
    assert!(matches!(
        parse_five_tuple(&short_tcp),
        Err(ParseError::Truncated { need: 4, .. })
    ));
    short_tcp[0] = 0x43; // IHL 12 bytes
    assert_eq!(
        parse_five_tuple(&short_tcp),
        Err(ParseError::HeaderLength(12))
    );
    // an extension header claiming more bytes than the packet has
    let pkt = v6(60, &[PROTO_UDP, 10, 0, 0, 0, 0, 0, 0], &[]);
    assert!(matches!(
        parse_five_tuple(&pkt),
        Err(ParseError::Truncated { .. })
    ));
}

#[test]
fn rfc3339_known_instants() {
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
    let t = UNIX_EPOCH + Duration::new(951_827_696, 123_456_000); // leap day 2000
    assert_eq!(rfc3339(t), "2000-02-29T12:34:56.123456Z");
    let t = UNIX_EPOCH + Duration::from_secs(1_795_309_323); // 2026-11-22T01:02:03Z
    assert_eq!(rfc3339(t), "2026-11-22T01:02:03.000000Z");
}

fn tuple(sport: u16) -> FiveTuple {
    FiveTuple {
        src: "198.18.1.2".parse().unwrap(),
        dst: "198.18.2.2".parse().unwrap(),
        proto: PROTO_TCP,
        sport: Some(sport),
        dport: Some(5201),
    }
}

#[test]
fn log_line_format() {
    let line = LogLine::new(
        UNIX_EPOCH + Duration::from_secs(1_795_309_323),
        &tuple(40000),
        3,
    );
    let v: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
    assert_eq!(v["time"], "2026-11-22T01:02:03.000000Z");
    assert_eq!(v["family"], 4);
    assert_eq!(v["proto"], "tcp");
    assert_eq!(v["src"], "198.18.1.2");
    assert_eq!(v["sport"], 40000);
    assert_eq!(v["dst"], "198.18.2.2");
    assert_eq!(v["dport"], 5201);
    assert_eq!(v["queue"], 3);
    assert!(!line.to_json().contains('\n'));
    let mut icmp = tuple(1);
    icmp.proto = PROTO_ICMP;
    icmp.sport = None;
    icmp.dport = None;
    let v: serde_json::Value =
        serde_json::from_str(&LogLine::new(UNIX_EPOCH, &icmp, 0).to_json()).unwrap();
    assert!(v["sport"].is_null() && v["dport"].is_null());
}

#[test]
fn each_connection_is_logged_once_and_memory_is_bounded() {
    let mut seen = SeenSet::new(2);
    assert!(seen.first_time(&tuple(1)));
    assert!(!seen.first_time(&tuple(1)));
    assert!(seen.first_time(&tuple(2)));
    assert!(seen.first_time(&tuple(3))); // evicts tuple(1)
    assert_eq!(seen.len(), 2);
    assert!(seen.first_time(&tuple(1)));
    assert!(!seen.first_time(&tuple(3)));
}

#[test]
fn connlog_appends_one_line_per_write() {
    let dir = std::env::temp_dir().join(format!("secperf-nfq-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("conn.jsonl");
    let _ = std::fs::remove_file(&path);
    {
        let mut log = ConnLog::open(&path).unwrap();
        log.write(&LogLine::new(UNIX_EPOCH, &tuple(1), 0)).unwrap();
        log.write(&LogLine::new(UNIX_EPOCH, &tuple(2), 0)).unwrap();
        assert_eq!(log.written, 2);
        // flushed per line: readable before the log is dropped
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    }
    let mut log = ConnLog::open(&path).unwrap(); // append, not truncate
    log.write(&LogLine::new(UNIX_EPOCH, &tuple(3), 0)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let sports: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["sport"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(sports, vec![1, 2, 3]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_log_directory_is_an_error_naming_the_path() {
    let err = ConnLog::open(std::path::Path::new("/nonexistent-dir/x.jsonl"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent-dir/x.jsonl"));
}
