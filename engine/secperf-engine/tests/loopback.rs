//! Each kind over loopback, with both sides' counts checked against each other.

mod common;

use common::{ok, TestServer};
use secperf_engine::Spec;

const SHORT: &str = r#""duration":0.3,"warmup":0.1,"interval":0.1"#;

fn spec(extra: &str) -> String {
    format!("{{{},{}}}", SHORT, extra)
}

#[test]
fn tcp_stream_send_bytes_match_and_records_in_order() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, recs) = ok(srv.addr, &spec(r#""kind":"stream","message_size":16384"#));
    assert_eq!(recs.first().unwrap()["type"], "start");
    assert_eq!(recs.last().unwrap()["type"], "result");
    // Format 2: the resolved spec names the sizes `message`, `request`, `response`.
    assert_eq!(recs[0]["format"], 2);
    assert_eq!(recs[0]["spec"]["message"], 16384);
    assert!(
        recs[0]["spec"].get("message_size").is_none(),
        "the old name is not echoed"
    );
    assert!(
        recs[0]["spec"].get("request").is_none(),
        "rr fields are not in a stream spec"
    );
    let intervals: Vec<_> = recs.iter().filter(|r| r["type"] == "interval").collect();
    assert!(intervals.len() >= 3, "intervals: {}", intervals.len());
    assert_eq!(intervals[0]["warmup"], true);
    assert_eq!(intervals.last().unwrap()["warmup"], false);
    assert!(r.totals.client.bytes_sent > 0);
    assert_eq!(r.totals.client.bytes_sent, r.totals.server.bytes_received);
    assert!(
        r.bytes > 0 && r.bytes < r.totals.server.bytes_received,
        "window excludes warm-up"
    );
    assert!(r.bits_per_second > 1e6);
    assert!(
        (r.duration_s - 0.3).abs() < 0.2,
        "duration {}",
        r.duration_s
    );
    assert!(r.retransmits.is_some() && r.loss.is_none());
    assert!(r.cpu.client.system_s + r.cpu.client.user_s > 0.0);
    assert!(r.cpu.server.system_s + r.cpu.server.user_s > 0.0);
    assert!(r.machine_cpu.total_s > 0.0 && r.machine_cpu.cpus >= 1);
    assert_eq!(r.totals.server.connections, 1);
}

#[test]
fn tcp_stream_receive_and_both_parallel() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"stream","direction":"receive","parallel":2,"payload":"text""#),
    );
    assert!(r.totals.server.bytes_sent > 0);
    assert_eq!(r.totals.server.bytes_sent, r.totals.client.bytes_received);
    assert_eq!(r.totals.client.bytes_sent, 0);
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"stream","direction":"both","parallel":2,"payload":"zeros""#),
    );
    assert!(r.totals.client.bytes_sent > 0 && r.totals.server.bytes_sent > 0);
    assert_eq!(r.totals.client.bytes_sent, r.totals.server.bytes_received);
    assert_eq!(r.totals.server.bytes_sent, r.totals.client.bytes_received);
    assert_eq!(r.totals.server.connections, 4);
}

#[test]
fn tcp_stream_tail_below_rcvlowat_still_arrives() {
    let srv = TestServer::start("127.0.0.1:0");
    // The default low-water mark of a large message is the message.
    let (r, recs) = ok(srv.addr, &spec(r#""kind":"stream","message_size":524288"#));
    assert_eq!(recs[0]["spec"]["rcvlowat"], 524288);
    assert_eq!(r.totals.client.bytes_sent, r.totals.server.bytes_received);
    // A paced sender that never fills the mark: reads wake on the read
    // timeout and at EOF, and every byte is counted, in both directions.
    let (r, _) = ok(
        srv.addr,
        &spec(
            r#""kind":"stream","direction":"both","message_size":1000,"rate_bps":2000000,"rcvlowat":1048576"#,
        ),
    );
    assert!(r.totals.client.bytes_sent > 10_000, "{:?}", r.totals.client);
    assert_eq!(r.totals.client.bytes_sent, r.totals.server.bytes_received);
    assert_eq!(r.totals.server.bytes_sent, r.totals.client.bytes_received);
}

#[test]
fn tcp_stream_paced_rate_is_held() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"stream","rate_bps":80000000,"message_size":8192,"socket_buffer":65536"#),
    );
    // The upper bound is what pacing promises; the lower one leaves room for a loaded machine.
    let ratio = r.bits_per_second / 80e6;
    assert!(
        (0.7..1.15).contains(&ratio),
        "paced rate {} bit/s",
        r.bits_per_second
    );
    assert!(
        r.socket.sndbuf >= 65536 && r.server_socket.rcvbuf >= 65536,
        "granted {:?}",
        r.socket
    );
}

#[test]
fn udp_stream_send_loss_counters_are_sane() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"stream","protocol":"udp","rate_bps":50000000,"message_size":1200"#),
    );
    let loss = r.loss.expect("udp has loss");
    assert!(r.totals.server.messages_received > 0);
    assert!(r.totals.server.messages_received <= r.totals.client.messages_sent);
    // Paced at 50 Mbit/s over loopback: little or nothing is dropped (a
    // loaded CI machine may starve the receiver for a moment).
    assert!(
        loss.ratio.expect("something was sent") < 0.2,
        "loss {:?}",
        loss
    );
    assert!(loss.lost <= r.sender.messages);
    assert_eq!(
        loss.lost,
        r.sender.messages.saturating_sub(r.receiver.messages)
    );
    assert_eq!(r.retransmits, None);
    let sent_rate = r.sender.bytes as f64 * 8.0 / r.duration_s;
    assert!(
        (0.7..1.2).contains(&(sent_rate / 50e6)),
        "sender rate {}",
        sent_rate
    );
    assert!(r.bits_per_second <= sent_rate * 1.1);
}

#[test]
fn udp_stream_receive_over_ipv6() {
    let Ok(sock) = std::net::UdpSocket::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    };
    drop(sock);
    let srv = TestServer::start("[::1]:0");
    let (r, recs) = ok(
        srv.addr,
        &spec(
            r#""kind":"stream","protocol":"udp","direction":"receive","rate_bps":20000000,"parallel":2"#,
        ),
    );
    assert!(recs[0]["data"].as_str().unwrap().starts_with("[::1]"));
    assert!(r.totals.client.messages_received > 0);
    assert!(r.totals.client.messages_received <= r.totals.server.messages_sent);
    assert!(r.loss.unwrap().ratio.expect("something was sent") < 0.2);
}

#[test]
fn tcp_rr_transactions_agree() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, recs) = ok(
        srv.addr,
        &spec(r#""kind":"rr","request_size":32,"response_size":256"#),
    );
    assert!(r.transactions > 10);
    assert_eq!(r.totals.client.transactions, r.totals.server.transactions);
    assert_eq!(
        r.totals.client.bytes_received,
        r.totals.server.transactions * 256
    );
    // Histogram window and counter window are cut a few transactions apart.
    assert!(
        r.latency_us.count.abs_diff(r.transactions) <= 3 + r.transactions / 100,
        "{} vs {}",
        r.latency_us.count,
        r.transactions
    );
    assert!(
        r.latency_us.p50 > 0.0
            && r.latency_us.min <= r.latency_us.p50
            && r.latency_us.p50 <= r.latency_us.max
    );
    assert!((r.transactions_per_second - r.transactions as f64 / r.duration_s).abs() < 1.0);
    let iv = recs.iter().find(|x| x["type"] == "interval").unwrap();
    assert!(iv["latency_us"]["p50"].as_f64().unwrap() > 0.0);
    assert!(recs[0]["spec"]["nodelay"] == true);
}

#[test]
fn tcp_rr_pipelined_inflight() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(srv.addr, &spec(r#""kind":"rr","inflight":8"#));
    assert!(r.transactions > 10);
    assert_eq!(r.totals.client.transactions, r.totals.server.transactions);
}

#[test]
fn udp_rr_counts_and_no_loss_on_loopback() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"rr","protocol":"udp","inflight":2,"request_size":3,"udp_timeout":1.0"#),
    );
    assert!(r.transactions > 10);
    assert!(r.totals.client.transactions <= r.totals.server.transactions);
    assert!(r.totals.server.transactions - r.totals.client.transactions <= 2);
    assert_eq!(r.loss.unwrap().lost, 0);
}

#[test]
fn crr_connections_match_accepts() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"crr","parallel":2,"request_size":10,"response_size":100"#),
    );
    assert!(r.transactions > 10);
    assert_eq!(r.totals.client.connections, r.totals.server.connections);
    assert_eq!(r.totals.client.transactions, r.totals.server.transactions);
    assert_eq!(r.close, Some("server-first"));
    assert!(r.latency_us.p50 > 0.0);
    assert_eq!(r.retransmits, None);
}

#[test]
fn many_tests_at_once_on_one_server() {
    let srv = TestServer::start("127.0.0.1:0");
    let addr = srv.addr;
    let hs: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                let kind = ["stream", "rr", "crr"][i];
                let (r, _) = ok(addr, &spec(&format!(r#""kind":"{}""#, kind)));
                r.totals
            })
        })
        .collect();
    for h in hs {
        let t = h.join().unwrap();
        assert_eq!(t.client.bytes_sent, t.server.bytes_received);
    }
}

// ------------------------------------------------------------ latency

fn dir<'a>(v: &'a serde_json::Value, d: &str) -> &'a serde_json::Value {
    &v[d]
}

fn result_value(recs: &[serde_json::Value]) -> serde_json::Value {
    recs.iter()
        .find(|r| r["type"] == "result")
        .expect("a result record")
        .clone()
}

#[test]
fn latency_full_duplex_counts_delays_and_histogram() {
    let srv = TestServer::start("127.0.0.1:0");
    let (res, recs) = ok(
        srv.addr,
        r#"{"kind":"latency","rate_pps":2000,"duration":1.0,"warmup":0.3,"interval":0.5}"#,
    );
    let v = result_value(&recs);
    for d in ["c2s", "s2c"] {
        let x = dir(&v, d);
        let sent = x["sent"].as_u64().unwrap();
        let received = x["received"].as_u64().unwrap();
        let lost = x["lost"].as_u64().unwrap();
        // Paced at 2000/s for 1 s: both directions run at once (full duplex).
        assert!(sent > 500, "{} sent {}", d, sent);
        assert_eq!(sent, received + lost, "{}", d);
        assert_eq!(lost, 0, "{}: no loss on loopback", d);
        // Loopback gives every probe its kernel stamps: none left out.
        assert_eq!(x["unstamped"], 0, "{}", d);
        assert!(x.get("fallback_stamps").is_none(), "{}", d);
        assert_eq!(x["loss_ratio"], 0.0, "{}", d);
        let delay = &x["delay_us"];
        let mean = delay["mean"].as_f64().unwrap();
        assert!(mean > 0.0 && mean < 10_000.0, "{} mean {}", d, mean);
        // Every probe but the stamps lost at the window's edges is timed.
        let count = delay["count"].as_u64().unwrap();
        assert!(count + 2 >= received && count <= received, "{}", d);
        let h = &x["histogram"];
        let total: u64 = h["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum::<u64>()
            + h["overflow"].as_u64().unwrap();
        assert_eq!(total, count, "{}: histogram sums to the count", d);
        assert_eq!(h["unit"], "us");
    }
    let c = dir(&v, "combined");
    assert_eq!(
        c["sent"].as_u64().unwrap(),
        v["c2s"]["sent"].as_u64().unwrap() + v["s2c"]["sent"].as_u64().unwrap()
    );
    assert_eq!(
        res.latency_us.count,
        c["delay_us"]["count"].as_u64().unwrap()
    );
    assert_eq!(res.loss.unwrap().lost, 0);
}

#[test]
fn latency_half_duplex_answers_each_probe() {
    let srv = TestServer::start("127.0.0.1:0");
    let (_, recs) = ok(
        srv.addr,
        r#"{"kind":"latency","rate_pps":1000,"duration":0.5,"warmup":0.2,"interval":0,"duplex":"half","frame_size":128}"#,
    );
    let v = result_value(&recs);
    // Each c2s probe is answered by one s2c probe, in the same window.
    assert_eq!(v["c2s"]["sent"], v["s2c"]["sent"]);
    assert!(v["s2c"]["received"].as_u64().unwrap() > 200);
}

#[test]
fn latency_bad_specs_are_errors() {
    for (extra, field) in [
        (r#""frame_size":63"#, "frame_size"),
        (r#""frame_size":1519"#, "frame_size"),
        (r#""rate_pps":0"#, "rate_pps"),
        (r#""protocol":"tcp""#, "protocol"),
        (r#""message_size":10"#, "message_size"),
    ] {
        let text = format!(
            r#"{{"kind":"latency","server":"127.0.0.1:5201",{}}}"#,
            extra
        );
        let e = Spec::parse(&text).expect_err(&text);
        assert_eq!(e.kind(), "spec");
        assert_eq!(e.field(), Some(field), "{}", text);
    }
    // IPv6 needs a larger frame than 64 bytes for the probe header.
    let e = Spec::parse(r#"{"kind":"latency","server":"[::1]:5201"}"#).expect_err("v6 64");
    assert_eq!(e.field(), Some("frame_size"));
}

/// TIME_WAIT sockets (state 06) on the client's side (whose peer is `ip`)
/// and on the server's (whose own address is `ip`), `ip` an IPv4 loopback
/// address only one test uses, from /proc/net/tcp.
fn time_waits(ip: std::net::Ipv4Addr) -> (usize, usize) {
    let want = format!("{:08X}", u32::from_le_bytes(ip.octets()));
    let text = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let tw: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<&str>>())
        .filter(|f| f.len() > 3 && f[3] == "06")
        .collect();
    let client = tw.iter().filter(|f| f[2].starts_with(&want)).count();
    let server = tw.iter().filter(|f| f[1].starts_with(&want)).count();
    (client, server)
}

/// A loopback address of 127.`net`.0.0/16 no earlier run used in the last
/// minute (their TIME_WAIT sockets would count).
fn fresh_loopback(net: u8) -> std::net::Ipv4Addr {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = (t.as_millis() as u32 ^ std::process::id().rotate_left(16)) % 65024;
    std::net::Ipv4Addr::new(127, net, (x / 254) as u8, (x % 254 + 1) as u8)
}

/// Room for this many more TIME_WAIT sockets in this namespace: beyond
/// tcp_max_tw_buckets the kernel keeps none (other work on the machine may
/// have filled the table), and a count of them says nothing.
fn time_wait_room() -> u64 {
    let max: u64 = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_max_tw_buckets")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let tw: u64 = std::fs::read_to_string("/proc/net/sockstat")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("TCP:"))?.to_string();
            let f: Vec<&str> = line.split_whitespace().collect();
            let i = f.iter().position(|w| *w == "tw")?;
            f.get(i + 1)?.parse().ok()
        })
        .unwrap_or(u64::MAX);
    max.saturating_sub(tw)
}

#[test]
fn crr_closes_leave_time_wait_where_they_say() {
    // Paced, so that the connections are few (no client port is used twice)
    // and the TIME_WAIT table is not filled by the test itself; each close on
    // its own loopback address, so the counts are this test's.
    for (net, close, parallel) in [
        (31, "server-first", 1),
        (32, "server-first", 4),
        (33, "client-first", 2),
        (34, "fin", 1),
        (35, "reset", 2),
    ] {
        let ip = fresh_loopback(net);
        let room = time_wait_room();
        let srv = TestServer::start(&format!("{}:0", ip));
        let text = format!(
            r#""kind":"crr","parallel":{},"close":"{}","rate":500,"timeout":1"#,
            parallel, close
        );
        let (r, recs) = ok(srv.addr, &spec(&text));
        let name = if close == "fin" {
            "client-first"
        } else {
            close
        };
        assert_eq!(recs[0]["spec"]["close"], name);
        assert_eq!(r.close, Some(name));
        assert!(r.transactions > 100, "{}: {}", close, r.transactions);
        assert_eq!(r.loss.expect("paced crr counts failures").lost, 0);
        assert_eq!(r.totals.client.connections, r.totals.server.connections);
        let n = r.totals.client.connections as usize;
        if room < 10_000 {
            eprintln!(
                "note: the TIME_WAIT table has room for {} only (other work fills it): their counts are not checked",
                room
            );
            continue;
        }
        let (client, server) = time_waits(ip);
        // The control connection may add one TIME_WAIT on either side.
        match name {
            "server-first" => {
                assert!(
                    server >= n,
                    "{}: {} server TIME_WAIT for {}",
                    close,
                    server,
                    n
                );
                assert!(client <= 1, "{}: {} client TIME_WAIT", close, client);
            }
            "client-first" => {
                assert!(
                    client >= n,
                    "{}: {} client TIME_WAIT for {}",
                    close,
                    client,
                    n
                );
                assert!(server <= 1, "{}: {} server TIME_WAIT", close, server);
            }
            _ => assert!(
                client + server <= 1,
                "an RST leaves no TIME_WAIT: {} client, {} server",
                client,
                server
            ),
        }
    }
}

#[test]
fn unpaced_crr_ends_every_connection_in_each_order() {
    let srv = TestServer::start("127.0.0.1:0");
    for close in ["server-first", "client-first", "reset"] {
        for parallel in [1, 8] {
            let text = format!(
                r#""kind":"crr","parallel":{},"close":"{}""#,
                parallel, close
            );
            let (r, _) = ok(srv.addr, &spec(&text));
            assert!(
                r.transactions > 10,
                "{} x{}: {}",
                close,
                parallel,
                r.transactions
            );
            // Every connection the client opened, the server accepted and answered.
            assert_eq!(r.totals.client.connections, r.totals.server.connections);
            assert_eq!(r.totals.client.transactions, r.totals.server.transactions);
        }
    }
}
