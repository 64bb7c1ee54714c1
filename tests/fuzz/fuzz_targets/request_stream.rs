//! The forwarder's reading of a client's byte stream (request heads, framing, bodies with the
//! one chunked coding, the head it sends on), fed anything: it must never panic, it must end,
//! and each head it would send on must read back as one request with the same method and target.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for read in stepproof::http::forward::read_requests(data, 64).into_iter().flatten() {
        match stepproof::http::forward::read_head(&read.onward) {
            Ok((sent, 0)) => {
                assert_eq!(sent.method, read.head.method);
                assert_eq!(sent.target, read.head.target);
            }
            other => panic!("{read:?} sent on as {other:?}"),
        }
    }
});
