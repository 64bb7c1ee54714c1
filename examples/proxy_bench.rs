//! Drives the allow-list proxy for `scripts/bench-proxy.sh`. Modes:
//!
//! * `proxy_bench proxy ALLOW... [--address CIDR]...`: serve the proxy on 127.0.0.1 (port
//!   printed on the first line) until standard input closes; then print the record count.
//! * `proxy_bench source BYTES`: a loopback server sending BYTES to each client, then closing.
//! * `proxy_bench fetch ADDR BYTES [TARGET]`: read BYTES from ADDR (through `CONNECT TARGET`
//!   when given); prints MiB/s.
//! * `proxy_bench latency ADDR ROUNDS [TARGET]`: connect (and CONNECT) and wait for the first
//!   byte, ROUNDS times; prints the median in microseconds.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;
use stepproof::profile::AllowList;
use stepproof::supervisor::proxy::{self, SystemResolver};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("proxy") => run_proxy(&args[1..]),
        Some("source") => run_source(args[1].parse().expect("BYTES")),
        Some("fetch") => run_fetch(&args[1], args[2].parse().expect("BYTES"), args.get(3)),
        Some("latency") => run_latency(&args[1], args[2].parse().expect("ROUNDS"), args.get(3)),
        _ => {
            eprintln!("usage: proxy_bench proxy|source|fetch|latency …");
            std::process::exit(2);
        }
    }
}

fn run_proxy(args: &[String]) {
    let (mut hosts, mut addresses) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--address" {
            addresses.push(it.next().expect("CIDR").clone());
        } else {
            hosts.push(arg.clone());
        }
    }
    let list = AllowList::new(hosts, addresses).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let compiled = list.compiled().clone();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().expect("addr").port());
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = proxy::serve(listener, compiled, Arc::new(SystemResolver), tx);
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {}
    handle.shutdown();
    eprintln!("records: {}", rx.try_iter().count());
}

fn run_source(bytes: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().expect("addr").port());
    std::io::stdout().flush().ok();
    let block = vec![0x5au8; 1 << 20];
    for stream in listener.incoming().flatten() {
        let block = block.clone();
        std::thread::spawn(move || {
            let mut s = stream;
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                if s.write_all(&block[..n]).is_err() {
                    return;
                }
                left -= n as u64;
            }
        });
    }
}

fn open(addr: &str, target: Option<&String>) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    if let Some(target) = target {
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .expect("CONNECT");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).expect("proxy reply");
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
    s
}

fn run_fetch(addr: &str, bytes: u64, target: Option<&String>) {
    let start = Instant::now();
    let mut s = open(addr, target);
    let mut buf = vec![0u8; 1 << 18];
    let mut got = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) => panic!("read: {e}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(got, bytes, "short transfer");
    println!("{:.1}", bytes as f64 / (1 << 20) as f64 / secs);
}

fn run_latency(addr: &str, rounds: usize, target: Option<&String>) {
    let mut times: Vec<u128> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let mut s = open(addr, target);
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte).expect("first byte");
            start.elapsed().as_micros()
        })
        .collect();
    times.sort_unstable();
    println!("{}", times[times.len() / 2]);
}
