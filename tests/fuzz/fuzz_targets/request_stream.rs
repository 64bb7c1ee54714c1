//! The forwarders' reading of a client's byte stream (request heads, framing, bodies with the
//! one chunked coding), fed anything: it must never panic, and it must end.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = stepproof::http::io::read_requests(data, 64);
});
