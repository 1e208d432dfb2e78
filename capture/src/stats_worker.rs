//! Statistics of host tensors computed on a second thread while the training thread runs the
//! next operators.
//!
//! The adapter journals the entry at once with a placeholder record
//! ([`pending_record`](crate::stats::pending_record)) and hands the tensor's memory to the
//! worker; the finished record's statistics come back as a [`Fill`] (the device-statistics
//! mechanism of the crate docs). The adapter keeps the memory alive and unchanged until the job
//! is finished: before anything writes into a tensor with a job in flight it calls
//! [`StatsWorker::complete`], which runs a job that has not started on the calling thread
//! (so the caller waits for that one pass, never for the queue ahead of it) and otherwise
//! waits for the worker to finish it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dumpfmt::json::Value;
use stats_gpu::summary::Options;

use crate::error::{Error, Result};
use crate::journal::Fill;
use crate::state::STAT_KEYS;
use crate::stats::{TensorInfo, tensor_record, type_name};

/// One tensor whose record the worker computes.
pub struct StatsJob {
    pub id: u64,
    ptr: usize,
    nbytes: usize,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub requires_grad: Option<bool>,
}

impl StatsJob {
    /// # Safety
    /// `ptr..ptr + nbytes` is the contiguous memory of a tensor that stays allocated and is
    /// not written until [`StatsWorker::complete`] (or [`StatsWorker::complete_all`]) has
    /// returned for `id`, or the worker is dropped.
    pub unsafe fn new(
        id: u64,
        ptr: usize,
        nbytes: usize,
        dtype: String,
        shape: Vec<usize>,
        requires_grad: Option<bool>,
    ) -> StatsJob {
        StatsJob {
            id,
            ptr,
            nbytes,
            dtype,
            shape,
            requires_grad,
        }
    }

    fn run(&self, opts: &Options, torch_threads: Option<usize>) -> Result<Value> {
        let bytes: &[u8] = if self.nbytes == 0 || self.ptr == 0 {
            &[]
        } else {
            // SAFETY: the contract of `StatsJob::new`.
            unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.nbytes) }
        };
        let info = TensorInfo {
            type_name: type_name(opts.flavour),
            dtype: &self.dtype,
            shape: &self.shape,
            bytes: Some(bytes),
            requires_grad: self.requires_grad,
            data_name: None,
            torch_threads,
            torch_mean_norm: None,
            on_torch_threads: None,
        };
        tensor_record(&info, opts)
    }
}

/// The statistics of a finished record as the fill of placeholder `id` (a statistic the
/// record lacks is `null`, as in the placeholder).
pub fn fill_of(id: u64, record: &Value) -> Fill {
    let get = |k: &str| match record {
        Value::Object(m) => m.get(k).cloned().unwrap_or(Value::Null),
        _ => Value::Null,
    };
    Fill {
        id,
        stats: STAT_KEYS.map(get),
    }
}

#[derive(Default)]
struct Queue {
    queued: VecDeque<StatsJob>,
    /// Ids being computed (by the worker or by a caller of `complete`).
    running: Vec<u64>,
    /// Finished and not yet taken.
    done: Vec<(u64, Result<Value>)>,
    stop: bool,
    /// The worker sleeps on the condition variable (a submission must wake it).
    worker_parked: bool,
    /// Callers of `complete`/`complete_all` sleeping on it (a finished job must wake them).
    waiters: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued for a parked worker, a job finishes while someone
    /// waits, or the worker must stop.
    changed: Condvar,
    /// `queued.len()`, readable without the lock (the worker polls it between jobs).
    queued_len: AtomicUsize,
    opts: Options,
    torch_threads: Option<usize>,
}

/// How long a thread polls before it sleeps on the condition variable. Waking a sleeping
/// thread on another core costs an inter-processor interrupt, measured at tens of µs per
/// submission in a VM (against 2 µs without), while jobs come every few hundred µs when they
/// come at all; the worker only runs where a core is idle, so polling costs nobody.
const POLL: Duration = Duration::from_millis(2);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        self.changed.wait(q).unwrap_or_else(|p| p.into_inner())
    }

    /// Takes queued job number `at` (the front for the worker, the back for a caller helping
    /// out, a given id for `complete`) and marks it running.
    fn take(&self, q: &mut Queue, at: usize) -> Option<StatsJob> {
        let job = q.queued.remove(at)?;
        self.queued_len.store(q.queued.len(), Ordering::Release);
        q.running.push(job.id);
        Some(job)
    }

    /// Runs `job` on this thread and publishes its result.
    fn run(&self, job: StatsJob) {
        let result = job.run(&self.opts, self.torch_threads);
        let mut q = self.lock();
        q.running.retain(|&id| id != job.id);
        q.done.push((job.id, result));
        let wake = q.waiters > 0;
        drop(q);
        if wake {
            self.changed.notify_all();
        }
    }

    /// Polls, then sleeps, until `ready` holds for the queue (checked under the lock).
    fn wait_until(&self, mut ready: impl FnMut(&Queue) -> bool) -> MutexGuard<'_, Queue> {
        let until = Instant::now() + POLL;
        loop {
            let q = self.lock();
            if ready(&q) {
                return q;
            }
            drop(q);
            if Instant::now() >= until {
                break;
            }
            std::thread::yield_now();
        }
        let mut q = self.lock();
        q.waiters += 1;
        while !ready(&q) {
            q = self.wait(q);
        }
        q.waiters -= 1;
        q
    }

    fn worker_loop(&self, delay: Option<Duration>) {
        loop {
            if let Some(d) = delay {
                std::thread::sleep(d);
            }
            let mut q = self.lock();
            if let Some(job) = self.take(&mut q, 0) {
                drop(q);
                self.run(job);
                continue;
            }
            if q.stop {
                return;
            }
            drop(q);
            let until = Instant::now() + POLL;
            while self.queued_len.load(Ordering::Acquire) == 0 && Instant::now() < until {
                std::thread::yield_now();
            }
            let mut q = self.lock();
            if q.queued.is_empty() && !q.stop {
                q.worker_parked = true;
                while q.queued.is_empty() && !q.stop {
                    q = self.wait(q);
                }
                q.worker_parked = false;
            }
        }
    }
}

/// A thread computing tensor records in submission order (see the module docs).
pub struct StatsWorker {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl StatsWorker {
    /// Starts the worker. `torch_threads`: as [`TensorInfo::torch_threads`]. `delay`: a pause
    /// before each job, for tests only: it holds the worker back so that a missing write guard
    /// shows as wrong statistics instead of depending on timing.
    pub fn new(
        opts: Options,
        torch_threads: Option<usize>,
        delay: Option<Duration>,
    ) -> Result<StatsWorker> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            queued_len: AtomicUsize::new(0),
            opts,
            torch_threads,
        });
        let s = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("numprobe-stats".into())
            .spawn(move || s.worker_loop(delay))
            .map_err(|e| Error::Tensor(format!("cannot start the statistics thread: {e}")))?;
        Ok(StatsWorker {
            shared,
            handle: Some(handle),
        })
    }

    pub fn submit(&self, job: StatsJob) {
        let mut q = self.shared.lock();
        q.queued.push_back(job);
        self.shared
            .queued_len
            .store(q.queued.len(), Ordering::Release);
        let wake = q.worker_parked;
        drop(q);
        if wake {
            self.shared.changed.notify_all();
        }
    }

    /// Jobs submitted and not yet taken by [`take_finished`](StatsWorker::take_finished).
    pub fn outstanding(&self) -> usize {
        let q = self.shared.lock();
        q.queued.len() + q.running.len() + q.done.len()
    }

    /// Finished jobs since the last call, in the order they finished; never waits.
    pub fn take_finished(&self) -> Vec<(u64, Result<Value>)> {
        std::mem::take(&mut self.shared.lock().done)
    }

    /// Returns once job `id` is finished (or was never submitted): a job still queued runs
    /// on the calling thread, a running one is waited for.
    pub fn complete(&self, id: u64) {
        let mut q = self.shared.lock();
        if let Some(at) = q.queued.iter().position(|j| j.id == id) {
            let job = self.shared.take(&mut q, at).expect("position is in range");
            drop(q);
            self.shared.run(job);
            return;
        }
        drop(q);
        drop(self.shared.wait_until(|q| !q.running.contains(&id)));
    }

    /// Returns once every submitted job is finished; the calling thread takes queued jobs
    /// from the back while the worker takes them from the front.
    pub fn complete_all(&self) {
        loop {
            let mut q = self.shared.lock();
            let last = q.queued.len().wrapping_sub(1);
            if let Some(job) = self.shared.take(&mut q, last) {
                drop(q);
                self.shared.run(job);
                continue;
            }
            drop(q);
            let q = self
                .shared
                .wait_until(|q| q.running.is_empty() || !q.queued.is_empty());
            if q.queued.is_empty() {
                return;
            }
        }
    }
}

impl Drop for StatsWorker {
    fn drop(&mut self) {
        // The jobs' memory is only guaranteed until the adapter lets go of it: finish them.
        self.complete_all();
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::pending_record;
    use stats_gpu::summary::{Flavour, Precision, SummaryMode};

    fn opts() -> Options {
        Options {
            mode: SummaryMode::Statistics,
            precision: Precision::Low,
            flavour: Flavour::PyTorch,
            ..Options::default()
        }
    }

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32 - 0.5) * 7.0
            })
            .collect()
    }

    /// The placeholder filled with the worker's statistics is the record the synchronous path
    /// writes, for every float dtype the adapter sends and with NaN/inf among the values.
    #[test]
    fn filled_placeholder_equals_the_synchronous_record() {
        let mut cases: Vec<(Vec<f32>, &str, Vec<usize>)> = vec![
            (data(100_003, 1), "torch.float32", vec![100_003]),
            (data(4096, 2), "torch.float32", vec![64, 64]),
            (vec![1.5], "torch.float32", vec![]),
        ];
        let mut with_nan = data(5000, 3);
        with_nan[17] = f32::NAN;
        cases.push((with_nan, "torch.float32", vec![5000]));
        let mut with_inf = data(5000, 4);
        with_inf[4000] = f32::NEG_INFINITY;
        cases.push((with_inf, "torch.float32", vec![5000]));
        // float16/bfloat16: 2-byte elements read from the same buffer.
        cases.push((data(2048, 5), "torch.float16", vec![4096]));
        cases.push((data(2048, 6), "torch.bfloat16", vec![64, 64]));
        for threads in [1, 2] {
            let worker = StatsWorker::new(opts(), Some(threads), None).unwrap();
            for (id, (xs, dtype, shape)) in cases.iter().enumerate() {
                let nbytes = if dtype.ends_with("float32") {
                    xs.len() * 4
                } else {
                    shape.iter().product::<usize>() * 2
                };
                let job = unsafe {
                    StatsJob::new(
                        id as u64,
                        xs.as_ptr() as usize,
                        nbytes,
                        dtype.to_string(),
                        shape.clone(),
                        Some(true),
                    )
                };
                worker.submit(job);
            }
            worker.complete_all();
            let mut finished = worker.take_finished();
            finished.sort_by_key(|(id, _)| *id);
            assert_eq!(finished.len(), cases.len());
            for ((id, got), (xs, dtype, shape)) in finished.into_iter().zip(&cases) {
                let want = {
                    let bytes: &[u8] = bytemuck::cast_slice(xs);
                    let n = if dtype.ends_with("float32") {
                        bytes.len()
                    } else {
                        shape.iter().product::<usize>() * 2
                    };
                    let info = TensorInfo {
                        type_name: "torch.Tensor",
                        dtype,
                        shape,
                        bytes: Some(&bytes[..n]),
                        requires_grad: Some(true),
                        data_name: None,
                        torch_threads: Some(threads),
                        torch_mean_norm: None,
                        on_torch_threads: None,
                    };
                    tensor_record(&info, &opts()).unwrap()
                };
                let got = got.unwrap();
                assert_eq!(got, want, "{dtype} {shape:?}");
                // The placeholder journaled at hook time, filled, is that record.
                let info = TensorInfo {
                    type_name: "torch.Tensor",
                    dtype,
                    shape,
                    bytes: None,
                    requires_grad: Some(true),
                    data_name: None,
                    torch_threads: None,
                    torch_mean_norm: None,
                    on_torch_threads: None,
                };
                let mut placeholder = pending_record(&info, &opts(), id).unwrap();
                let mut state = crate::state::DumpState::new();
                let mut body = dumpfmt::json::Map::new();
                body.insert("output", Value::Array(vec![placeholder.clone()]));
                state.apply(&crate::journal::Record::PendingEntry {
                    name: "A".into(),
                    body,
                    reinsert: false,
                    pending: vec![id],
                });
                state.apply(&crate::journal::Record::Fill(vec![fill_of(id, &got)]));
                if let Some(Value::Array(a)) =
                    state.entry("A").as_ref().and_then(|m| m.get("output"))
                {
                    placeholder = a[0].clone();
                }
                assert_eq!(placeholder, want, "filled {dtype} {shape:?}");
            }
        }
    }

    /// `complete` returns for a queued job (run on the caller), a running or finished one, and
    /// an id never submitted; every job is reported exactly once.
    #[test]
    fn complete_steals_queued_jobs_and_reports_each_once() {
        let worker = StatsWorker::new(opts(), Some(1), None).unwrap();
        let bufs: Vec<Vec<f32>> = (0..40).map(|i| data(200_000 + i, i as u32)).collect();
        for (i, b) in bufs.iter().enumerate() {
            let job = unsafe {
                StatsJob::new(
                    i as u64,
                    b.as_ptr() as usize,
                    b.len() * 4,
                    "torch.float32".into(),
                    vec![b.len()],
                    None,
                )
            };
            worker.submit(job);
        }
        for i in (0..40).rev().step_by(3) {
            worker.complete(i);
        }
        worker.complete(1000);
        let mut ids: Vec<u64> = worker.take_finished().into_iter().map(|(i, _)| i).collect();
        for i in (0..40).rev().step_by(3) {
            assert!(ids.contains(&i), "job {i} not finished after complete");
        }
        worker.complete_all();
        ids.extend(worker.take_finished().into_iter().map(|(i, _)| i));
        ids.sort_unstable();
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
        assert_eq!(worker.outstanding(), 0);
    }
}
