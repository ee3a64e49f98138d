//! Arbitrary bytes (seeded with recorded requests, mutated with the dictionary's field names
//! and JSON tokens) through the whole request path: parse, validate, allocate, answer.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    dapi_fuzz::check_request_path(dapi_fuzz::production(), body);
});
