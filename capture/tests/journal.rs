//! Journal framing, replay rules, the JSON files and recovery.

use std::path::Path;

use capture::journal::{self, JournalWriter, Meta, Record};
use capture::{DumpState, Session};
use dumpfmt::json::{self, Map, Value};

fn meta() -> Meta {
    Meta {
        task: "statistics".into(),
        level: "mix".into(),
        framework: "pytorch".into(),
        dump_data_dir: None,
        extra_info: true,
    }
}

fn entry(name: &str, key: &str, v: Value, reinsert: bool) -> Record {
    Record::Entry {
        name: name.into(),
        body: Map::new().with(key, v),
        reinsert,
    }
}

fn sample_records() -> Vec<Record> {
    vec![
        Record::Meta(meta()),
        entry(
            "Module.fc.Linear.forward.0",
            "input_args",
            Value::Array(vec![]),
            false,
        ),
        entry(
            "Functional.linear.0.forward",
            "input_args",
            Value::Array(vec![Value::Float(0.1)]),
            false,
        ),
        Record::Stack {
            name: "Functional.linear.0.forward".into(),
            frames: vec!["File a.py, line 1, in f, \n x".into()],
        },
        Record::Construct {
            name: "Functional.linear.0.forward".into(),
            parent: Some("Module.fc.Linear.forward.0".into()),
        },
        entry(
            "Functional.linear.0.forward",
            "output",
            Value::Array(vec![Value::Float(f64::NAN)]),
            false,
        ),
        entry(
            "Module.fc.Linear.forward.0",
            "output",
            Value::Array(vec![Value::Int(-3)]),
            true,
        ),
        Record::Stack {
            name: "Module.fc.Linear.forward.0".into(),
            frames: vec!["File a.py, line 1, in f, \n x".into()],
        },
        Record::Construct {
            name: "Module.fc.Linear.forward.0".into(),
            parent: None,
        },
        Record::StackRef {
            name: "Functional.relu.0.forward".into(),
            group: 0,
        },
        entry("Tmp.x.0.forward", "output", Value::Null, false),
        Record::Remove {
            name: "Tmp.x.0.forward".into(),
        },
        Record::Checkpoint,
    ]
}

#[test]
fn records_round_trip_through_encode_decode() {
    for r in sample_records() {
        let back = Record::decode(&r.encode()).expect("decodes");
        assert_eq!(back, r);
    }
}

#[test]
fn lent_encoding_equals_the_copying_one_and_gives_the_body_back() {
    let mut pending = sample_records();
    pending.push(Record::PendingEntry {
        name: "Torch.add.0.forward".into(),
        body: Map::new().with("output", Value::Array(vec![Value::Int(1)])),
        reinsert: true,
        pending: vec![3, 4],
    });
    for r in pending {
        let mut lent = r.clone();
        assert_eq!(lent.encode_lent(), r.encode());
        assert_eq!(lent, r);
    }
}

#[test]
fn replay_follows_msprobe_ordering() {
    let mut s = DumpState::new();
    for r in sample_records() {
        s.apply(&r);
    }
    let keys: Vec<String> = s.data_names().map(str::to_owned).collect();
    // The module moved behind the API it contains; the removed entry is gone.
    assert_eq!(
        keys,
        ["Functional.linear.0.forward", "Module.fc.Linear.forward.0"]
    );
    let m = s.entry("Module.fc.Linear.forward.0").unwrap();
    let mk: Vec<String> = m.keys().map(|k| k.to_string()).collect();
    assert_eq!(mk, ["input_args", "output"]);
    // Both names share one frame list, and the reference joins it: one stack group.
    let stack = s.stack_value();
    let g = stack.get("0").unwrap().as_array().unwrap();
    let names: Vec<&str> = g[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Functional.linear.0.forward",
            "Module.fc.Linear.forward.0",
            "Functional.relu.0.forward"
        ]
    );
    assert!(stack.get("1").is_none());
    assert_eq!(s.construct().len(), 2);
    assert_eq!(s.data_len(), 2);
    assert_eq!(s.data().len(), 2);
}

#[test]
fn every_truncation_replays_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let recs = sample_records();
    let mut w = JournalWriter::create(&path).unwrap();
    let mut ends = vec![w.len()];
    for r in &recs {
        w.append(r).unwrap();
        ends.push(w.len());
    }
    drop(w);
    let bytes = std::fs::read(&path).unwrap();
    for cut in 0..=bytes.len() {
        let rp = journal::parse(&bytes[..cut], &path).unwrap();
        let complete = ends
            .iter()
            .filter(|&&e| e as usize <= cut)
            .count()
            .saturating_sub(1);
        assert_eq!(rp.records.len(), complete, "cut at {cut}");
        assert_eq!(rp.records[..], recs[..complete]);
    }
}

#[test]
fn corrupt_frame_is_skipped_and_bad_magic_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let mut w = JournalWriter::create(&path).unwrap();
    let recs = sample_records();
    for r in &recs {
        w.append(r).unwrap();
    }
    drop(w);
    let good = std::fs::read(&path).unwrap();
    let clean = journal::parse(&good, &path).unwrap();
    assert_eq!(clean.version, Some((journal::MAJOR, journal::MINOR)));
    assert_eq!(clean.records, recs);
    // Frame starts: the version frame, then one per record.
    let mut starts = vec![8usize];
    while *starts.last().unwrap() < good.len() {
        let at = *starts.last().unwrap();
        let len = u32::from_le_bytes(good[at..at + 4].try_into().unwrap()) as usize;
        starts.push(at + 8 + len);
    }
    // A flipped payload byte of the 3rd record: that record alone is lost.
    let mut bytes = good.clone();
    bytes[starts[3] + 10] ^= 0x55;
    let rp = journal::parse(&bytes, &path).unwrap();
    let mut want = recs.clone();
    want.remove(2);
    assert_eq!(rp.records, want);
    assert_eq!((rp.damaged_frames, rp.ignored_tail), (1, 0));
    assert_eq!(rp.damaged_bytes as usize, starts[4] - starts[3]);
    // A flipped length field: reading resynchronises on the next intact frame by scanning.
    let mut bytes = good.clone();
    bytes[starts[3] + 2] ^= 0x40;
    let rp = journal::parse(&bytes, &path).unwrap();
    assert_eq!(rp.records, want);
    assert_eq!(rp.damaged_frames, 1);
    // Damage in the last frame is a torn tail, not a lost record in the middle.
    let mut bytes = good.clone();
    let last = starts[starts.len() - 2];
    bytes[last + 9] ^= 0x01;
    let rp = journal::parse(&bytes, &path).unwrap();
    assert_eq!(rp.records, recs[..recs.len() - 1]);
    assert_eq!(rp.damaged_frames, 0);
    assert_eq!(rp.ignored_tail as usize, good.len() - last);
    let err = journal::parse(b"NOTAJOURNALATALL", &path).unwrap_err();
    assert!(err.to_string().contains("bad magic"), "{err}");
}

#[test]
fn journals_without_a_version_frame_still_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    // The layout of journals written before format versions: magic NPJRNL01, then frames.
    let mut bytes = b"NPJRNL01".to_vec();
    for r in sample_records() {
        let p = r.encode();
        bytes.extend_from_slice(&(p.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&p).to_le_bytes());
        bytes.extend_from_slice(&p);
    }
    let rp = journal::parse(&bytes, &path).unwrap();
    assert_eq!(rp.version, None);
    assert_eq!(rp.records, sample_records());
    bytes[6..8].copy_from_slice(b"07");
    let err = journal::parse(&bytes, &path).unwrap_err().to_string();
    assert!(
        err.contains("journal format 7.0 is newer than this numprobe reads"),
        "{err}"
    );
}

fn read_json(p: &Path) -> Value {
    json::parse_file(p).unwrap()
}

#[test]
fn recover_rebuilds_what_the_session_wrote() {
    let root = tempfile::tempdir().unwrap();
    let rank = root.path().join("step0").join("proc1");
    let mut s = Session::create(&rank, meta()).unwrap();
    for r in sample_records().into_iter().skip(1) {
        s.record(r).unwrap();
    }
    s.write_json().unwrap();
    let want: Vec<Vec<u8>> = ["dump.json", "stack.json", "construct.json"]
        .iter()
        .map(|f| std::fs::read(rank.join(f)).unwrap())
        .collect();
    drop(s);
    for f in ["dump.json", "stack.json", "construct.json"] {
        std::fs::remove_file(rank.join(f)).unwrap();
    }
    let rec = capture::recover(root.path()).unwrap();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].entries, 2);
    for (f, w) in ["dump.json", "stack.json", "construct.json"]
        .iter()
        .zip(&want)
    {
        assert_eq!(&std::fs::read(rank.join(f)).unwrap(), w, "{f}");
    }
    // The files are what dumpfmt reads as a dump.
    let d = dumpfmt::dump::DumpFile::open(&rank.join("dump.json")).unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(
        read_json(&rank.join("construct.json"))
            .as_object()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn an_entry_with_its_stack_reference_is_two_frames_of_one_write() {
    let root = tempfile::tempdir().unwrap();
    let one = root.path().join("one");
    let two = root.path().join("two");
    let mut a = Session::create(&one, meta()).unwrap();
    let mut b = Session::create(&two, meta()).unwrap();
    let frames = vec!["File a.py, line 1, in f, \n x".to_string()];
    for s in [&mut a, &mut b] {
        s.record(entry(
            "Torch.add.0.forward",
            "input_args",
            Value::Null,
            false,
        ))
        .unwrap();
        s.stack("Torch.add.0.forward".into(), frames.clone())
            .unwrap();
    }
    let e = entry("Torch.add.1.forward", "input_args", Value::Int(2), false);
    a.record(e.clone()).unwrap();
    a.stack_ref("Torch.add.1.forward".into(), 0).unwrap();
    b.record_with_stack_ref(e, "Torch.add.1.forward".into(), 0)
        .unwrap();
    // A group that does not exist is refused, as by stack_ref.
    let bad = entry("Torch.add.2.forward", "input_args", Value::Null, false);
    assert!(
        b.record_with_stack_ref(bad, "Torch.add.2.forward".into(), 7)
            .is_err()
    );
    let ja = std::fs::read(one.join(journal::FILE_NAME)).unwrap();
    let jb = std::fs::read(two.join(journal::FILE_NAME)).unwrap();
    assert_eq!(ja, jb);
    assert_eq!(a.state().stack_value(), b.state().stack_value());
    assert_eq!(a.state().data(), b.state().data());
}

/// A journal found in a dump (not named by the user) that is a link out of its directory is
/// refused, never replayed into that directory's files: it could be another capture's journal,
/// or any file. A journal the user names is read wherever its link leads.
#[cfg(unix)]
#[test]
fn recover_refuses_a_journal_linked_out_of_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other");
    let mut s = Session::create(&other, meta()).unwrap();
    for r in sample_records().into_iter().skip(1) {
        s.record(r).unwrap();
    }
    // Dropped without write_json: the journal stays, as after a crash.
    drop(s);
    let rank = tmp.path().join("dump/step0/rank0");
    std::fs::create_dir_all(&rank).unwrap();
    let link = rank.join(journal::FILE_NAME);
    std::os::unix::fs::symlink(other.join(journal::FILE_NAME), &link).unwrap();
    let e = capture::recover(&tmp.path().join("dump")).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("outside its directory") && text.contains(journal::FILE_NAME),
        "{text}"
    );
    assert!(!rank.join("dump.json").exists());
    // Named by the user: replayed into the link's directory.
    let rec = capture::recover(&link).unwrap();
    assert_eq!(rec[0].entries, 2);
    assert!(rank.join("dump.json").is_file());
}

#[test]
fn recover_without_journal_is_an_error() {
    let root = tempfile::tempdir().unwrap();
    let err = capture::recover(root.path()).unwrap_err();
    assert!(err.to_string().contains("no journal"), "{err}");
}

/// The indexed entry store against Python dict semantics (a plain ordered Map), over many
/// merges, moves and removals (enough to trigger compactions).
#[test]
fn indexed_entries_follow_dict_semantics() {
    let mut s = DumpState::new();
    let mut model = Map::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for step in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let name = format!("Tensor.add.{}.forward", x % 300);
        let key = if x & (1 << 20) != 0 {
            "input"
        } else {
            "output"
        };
        let rec = match (x >> 33) % 8 {
            0 => Record::Remove { name: name.clone() },
            1 | 2 => entry(&name, key, Value::Int(step as i64), true),
            _ => entry(&name, key, Value::Int(step as i64), false),
        };
        s.apply(&rec);
        match rec {
            Record::Remove { name } => {
                model.remove(&name);
            }
            Record::Entry {
                name,
                body,
                reinsert,
            } => {
                if reinsert && let Some(v) = model.remove(&name) {
                    model.insert(name.as_str(), v);
                }
                if !model.contains_key(&name) {
                    model.insert(name.as_str(), Value::Object(Map::new()));
                }
                let m = model.get_mut(&name).and_then(Value::as_object_mut).unwrap();
                for (k, v) in body.iter() {
                    m.insert(k.clone(), v.clone());
                }
            }
            _ => unreachable!(),
        }
    }
    assert_eq!(s.data(), model);
}

/// A clean stop (`settle`) leaves msprobe's files only; recording after it starts a new journal
/// that holds the whole state, so a kill then still recovers everything, the records from
/// before the stop included.
#[test]
fn settle_removes_the_journal_and_a_later_record_restarts_it_whole() {
    let root = tempfile::tempdir().unwrap();
    let rank = root.path().join("step0").join("proc1");
    let jpath = rank.join(journal::FILE_NAME);
    let mut s = Session::create(&rank, meta()).unwrap();
    let records = sample_records();
    let (first, second) = records[1..].split_at(2);
    for r in first {
        s.record(r.clone()).unwrap();
    }
    assert!(jpath.exists());
    assert!(s.settle(false).unwrap());
    // Complete under their names at once; durable, and the journal gone, once the
    // background job is done.
    let dump = json::parse(&std::fs::read(rank.join("dump.json")).unwrap(), &rank).unwrap();
    assert_eq!(
        dump.get("data").and_then(Value::as_object).map(|d| d.len()),
        Some(2)
    );
    capture::durable::wait_all().unwrap();
    assert!(!jpath.exists(), "a clean stop leaves no journal");
    let mut names: Vec<String> = std::fs::read_dir(&rank)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["construct.json", "dump.json", "stack.json"]);
    // Settling again with nothing new is a no-op.
    assert!(s.settle(false).unwrap());
    assert!(!jpath.exists());

    // Recording goes on after the stop: the new journal starts with the state so far.
    for r in second {
        s.record(r.clone()).unwrap();
    }
    assert!(jpath.exists());
    s.write_json().unwrap();
    let want: Vec<Vec<u8>> = ["dump.json", "stack.json", "construct.json"]
        .iter()
        .map(|f| std::fs::read(rank.join(f)).unwrap())
        .collect();
    drop(s); // as a kill would leave it: journal present
    for f in ["dump.json", "stack.json", "construct.json"] {
        std::fs::remove_file(rank.join(f)).unwrap();
    }
    capture::recover(root.path()).unwrap();
    for (f, w) in ["dump.json", "stack.json", "construct.json"]
        .iter()
        .zip(&want)
    {
        assert_eq!(&std::fs::read(rank.join(f)).unwrap(), w, "{f}");
    }
}

/// `settle(true)` (NUMPROBE_KEEP_JOURNAL) writes the files and keeps the journal.
#[test]
fn settle_keeping_the_journal() {
    let root = tempfile::tempdir().unwrap();
    let rank = root.path().join("step0").join("proc1");
    let mut s = Session::create(&rank, meta()).unwrap();
    for r in sample_records().into_iter().skip(1) {
        s.record(r).unwrap();
    }
    assert!(!s.settle(true).unwrap());
    assert!(rank.join(journal::FILE_NAME).exists());
    assert!(rank.join("dump.json").exists());
}

/// A journal as a killed process leaves it: read while its writer is alive, so the space
/// reserved ahead of the frames is still in the file (zeros on Linux). Every record written
/// replays, and the reserved space is neither damage nor a torn tail.
#[test]
fn a_journal_read_while_written_replays_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let recs = sample_records();
    let mut w = JournalWriter::create(&path).unwrap();
    for r in &recs {
        w.append(r).unwrap();
    }
    let on_disk = std::fs::metadata(&path).unwrap().len();
    assert!(on_disk >= w.len());
    let rp = journal::read(&path).unwrap();
    assert_eq!(rp.records, recs);
    assert_eq!(
        (rp.ignored_tail, rp.damaged_frames, rp.unread_frames()),
        (0, 0, 0)
    );
    // Dropped (a clean end that keeps the journal): the file ends with its last frame.
    let written = w.len();
    drop(w);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), written);
    assert_eq!(journal::read(&path).unwrap().records, recs);
}

/// Many megabytes of records (past several growths of the reserved space), then a torn last
/// frame as a kill in the middle of an append leaves it: every whole record replays, in order.
#[test]
fn a_journal_past_its_reservations_replays_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let mut w = JournalWriter::create(&path).unwrap();
    let big = "x".repeat(40_000);
    let recs: Vec<Record> = (0..200)
        .map(|i| {
            entry(
                &format!("Tensor.add.{i}.forward"),
                "input_args",
                Value::Str(big.as_str().into()),
                false,
            )
        })
        .collect();
    for r in &recs {
        w.append(r).unwrap();
    }
    let written = w.len() as usize;
    assert!(written > 8_000_000);
    let rp = journal::read(&path).unwrap();
    assert_eq!(rp.records, recs);
    assert_eq!(rp.ignored_tail, 0);
    drop(w);
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), written);
    // The last frame cut in its middle, the rest of the file zeros (reserved, never written).
    bytes.truncate(written - 20_000);
    bytes.resize(written + 100_000, 0);
    let rp = journal::parse(&bytes, &path).unwrap();
    assert_eq!(rp.records, recs[..recs.len() - 1]);
    assert!(rp.ignored_tail > 0 && rp.ignored_tail < 40_100);
    assert_eq!(rp.damaged_frames, 0);
}

/// A clean end removes the journal whole (no reserved space left behind on disk).
#[test]
fn a_removed_journal_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let mut w = JournalWriter::create(&path).unwrap();
    w.append(&Record::Meta(meta())).unwrap();
    w.remove().unwrap();
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// Sessions of one directory in succession (a run restarted in the same process, the same
/// dump path): the next one's journal waits for the last one's durable end instead of
/// finding its journal still locked, and every session's files and journal end as a clean
/// step leaves them.
#[test]
fn sessions_of_one_directory_in_succession() {
    let root = tempfile::tempdir().unwrap();
    let rank = root.path().join("step0").join("proc1");
    for round in 0..5 {
        let mut s = Session::create(&rank, meta()).unwrap();
        for r in sample_records().into_iter().skip(1) {
            s.record(r).unwrap();
        }
        assert!(s.settle(false).unwrap(), "round {round}");
        // Complete at once, before the background end.
        let dump = json::parse(&std::fs::read(rank.join("dump.json")).unwrap(), &rank).unwrap();
        assert!(dump.get("data").and_then(Value::as_object).is_some());
    }
    capture::durable::wait_all().unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&rank)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["construct.json", "dump.json", "stack.json"]);
}
