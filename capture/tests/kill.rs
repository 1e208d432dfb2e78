//! A writer process SIGKILLed at random points loses no record it had acknowledged.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use capture::{Meta, Record, Session};
use dumpfmt::json::{Map, Value};

const CHILD_ENV: &str = "NUMPROBE_KILL_TEST_DIR";

fn entry_name(i: u64) -> String {
    format!("Functional.linear.{i}.forward")
}

/// Runs only as the child: records entries forever, printing each index once journaled.
#[test]
fn kill_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let meta = Meta {
        task: "statistics".into(),
        level: "L1".into(),
        framework: "pytorch".into(),
        dump_data_dir: None,
        extra_info: true,
    };
    let mut s = Session::create(std::path::Path::new(&dir), meta).unwrap();
    let out = std::io::stdout();
    for i in 0u64.. {
        let t = Map::new()
            .with("type", "torch.Tensor")
            .with("dtype", "torch.float32")
            .with("shape", Value::Array(vec![Value::Int(3)]))
            .with("Max", Value::Float(i as f64 + 0.5));
        s.record(Record::Entry {
            name: entry_name(i),
            body: Map::new()
                .with("input_args", Value::Array(vec![Value::Object(t.clone())]))
                .with("input_kwargs", Map::new()),
            reinsert: false,
        })
        .unwrap();
        s.record(Record::Entry {
            name: entry_name(i),
            body: Map::new().with("output", Value::Array(vec![Value::Object(t)])),
            reinsert: false,
        })
        .unwrap();
        if i % 50 == 49 {
            s.write_json().unwrap();
        }
        let mut o = out.lock();
        writeln!(o, "{i}").unwrap();
        o.flush().unwrap();
    }
}

#[test]
fn sigkill_at_random_points_keeps_every_acknowledged_entry() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    for round in 0..6 {
        // xorshift: a different kill point each round and run.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = seed % 400;
        let dir = tempfile::tempdir().unwrap();
        let rank = dir.path().join("step0").join("proc1");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "kill_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &rank)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut acked: Option<u64> = None;
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while let Some(Ok(l)) = lines.next() {
            if let Ok(i) = l.trim().parse::<u64>() {
                acked = Some(i);
                if i >= kill_after {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let acked = acked.expect("child acknowledged nothing");
        let rec = capture::recover(dir.path()).unwrap();
        assert_eq!(rec.len(), 1);
        let dump = dumpfmt::dump::DumpFile::open(&rank.join("dump.json")).unwrap();
        for i in 0..=acked {
            let e = dump
                .entry(&entry_name(i))
                .unwrap_or_else(|| panic!("round {round}: entry {i} of {acked} lost"));
            assert!(
                e.output().is_some(),
                "round {round}: entry {i} lost its output"
            );
        }
        // Entries are in recording order.
        let names: Vec<&str> = dump.entries().map(|e| e.name).collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(*n, entry_name(i as u64));
        }
    }
}
