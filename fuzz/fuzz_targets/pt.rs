//! The .pt reader: see `tensor_file.rs`.
#![no_main]

mod tensor_file;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensor_file::check(data, "pt"));
