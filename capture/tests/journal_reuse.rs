//! The durability worker prepares the next journal's file once a step is durable (Linux):
//! the next journal takes it, reads exactly its own records, and is an eighth larger than the
//! last one wrote; a name that is taken still gets the named path's handling. One test binary
//! of its own: prepared files are per process, so no other test takes them meanwhile.
#![cfg(target_os = "linux")]

use std::path::Path;

use capture::journal::{self, JournalWriter, Record};
use capture::{Error, durable};

fn construct(i: usize) -> Record {
    Record::Construct {
        name: format!("Module.layer{i}.Linear.forward.0 {}", "x".repeat(i % 300)),
        parent: i.is_multiple_of(3).then(|| format!("Module.block{i}")),
    }
}

fn write(path: &Path, n: usize) -> JournalWriter {
    let mut w = JournalWriter::create(path).unwrap();
    for i in 0..n {
        w.append(&construct(i)).unwrap();
    }
    w
}

fn records(path: &Path) -> Vec<Record> {
    let r = journal::read(path).unwrap();
    assert_eq!(r.ignored_tail, 0, "{}", path.display());
    assert_eq!(r.damaged_frames, 0, "{}", path.display());
    r.records
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn the_next_journal_is_prepared_while_the_step_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|d| {
            let p = tmp.path().join(d);
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    let want: Vec<Record> = (0..3000).map(construct).collect();
    // Past the first reservation (256 KiB), so a prepared file is larger than a fresh one.
    let first = dirs[0].join(journal::FILE_NAME);
    let w = write(&first, 3000);
    let used = w.len();
    assert!(used > 256 << 10, "{used}");
    durable::submit(&durable::DirKey::of(&dirs[0]), Vec::new(), Some(w));
    durable::wait_all().unwrap();
    assert!(!first.exists());

    // A name already taken: a killed run's journal is emptied and written by name (a fresh
    // reservation), another live capture's is refused; the prepared file stays ready.
    let stale = dirs[1].join(journal::FILE_NAME);
    std::fs::write(&stale, b"NPJRNL02 left by a killed run").unwrap();
    let held = write(&stale, 2);
    assert_eq!(records(&stale), want[..2].to_vec());
    assert_eq!(file_len(&stale), 256 << 10);
    match JournalWriter::create(&stale) {
        Err(Error::Busy { dir }) => assert_eq!(dir, dirs[1]),
        other => panic!("a live journal's name was taken: {:?}", other.map(|_| ())),
    }

    // The prepared file: an eighth larger than the last journal wrote (a slightly longer
    // step grows no map), none of its frames, only the new journal's.
    let second = dirs[2].join(journal::FILE_NAME);
    let w = write(&second, 5);
    let margin = used + used / 8;
    assert!(
        file_len(&second) >= margin,
        "{} < {margin}",
        file_len(&second)
    );
    assert_eq!(records(&second), want[..5].to_vec());
    // A journal that stays (a kept or failed step) ends with its last frame.
    let len = w.len();
    drop(w);
    assert_eq!(file_len(&second), len);
    assert_eq!(records(&second), want[..5].to_vec());

    // Taken once: the next journal without a finished step in between is made by name.
    let third = dirs[3].join(journal::FILE_NAME);
    let w = write(&third, 7);
    assert_eq!(file_len(&third), 256 << 10);
    assert_eq!(records(&third), want[..7].to_vec());
    w.remove().unwrap();
    drop(held);
}
