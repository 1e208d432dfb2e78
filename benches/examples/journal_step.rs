//! What one step's journal costs on this machine's file system: create it, append frames of
//! an entry's size until it holds a step's bytes, remove it (what a clean capture step does),
//! against copying the same bytes into a buffer that is reused. The difference is the file
//! system's part (reservation, first-touch page faults, unlink), measured in benches/RESULTS.md.
//!
//!     cargo run --release -p numprobe-benches --example journal_step -- [KIB] [FRAME] [DIR]
//!
//! KIB: bytes per step's journal (default 400, tiny Llama's), FRAME: bytes per frame (1200),
//! DIR: the directory the journals go into, a temporary one inside it (default: the current
//! one; pass one on the dump's file system).
use std::time::Instant;

use capture::journal::JournalWriter;

fn main() {
    let mut args = std::env::args().skip(1);
    let kib: usize = args
        .next()
        .map_or(400, |s| s.parse().expect("KIB: an integer"));
    let frame: usize = args
        .next()
        .map_or(1200, |s| s.parse().expect("FRAME: an integer"));
    let base = tempfile::tempdir_in(args.next().unwrap_or_else(|| ".".into()))
        .expect("a temporary directory");
    let payload = vec![b'7'; frame];
    let frames = (kib << 10) / (frame + 8);
    let (warm, steps) = (10, 60);

    let mut journal_us = Vec::with_capacity(steps);
    for i in 0..warm + steps {
        let t = Instant::now();
        let mut w = JournalWriter::create(&base.path().join("numprobe_journal.bin"))
            .expect("journal created");
        for _ in 0..frames {
            w.append_payload(&payload).expect("frame appended");
        }
        w.remove().expect("journal removed");
        if i >= warm {
            journal_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }

    let mut buf: Vec<u8> = Vec::with_capacity(frames * (frame + 8));
    let mut copy_us = Vec::with_capacity(steps);
    for i in 0..warm + steps {
        let t = Instant::now();
        buf.clear();
        for _ in 0..frames {
            buf.extend_from_slice(&(frame as u32).to_le_bytes());
            buf.extend_from_slice(&[0; 4]);
            buf.extend_from_slice(&payload);
        }
        std::hint::black_box(&buf);
        if i >= warm {
            copy_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    println!(
        "{frames} frames of {frame} bytes ({kib} KiB) per step, median of {steps}: journal \
         (create, append, remove) {:.0} us, copy into a reused buffer {:.0} us",
        median(&mut journal_us),
        median(&mut copy_us)
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
