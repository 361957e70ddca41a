#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kquota_proxy_fuzz::own_topics(data));
