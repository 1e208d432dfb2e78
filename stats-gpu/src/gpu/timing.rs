//! Timestamp queries around compute passes, and a device-to-device copy as the bandwidth yardstick.

use std::time::{Duration, Instant};

use super::context::Context;
use super::{Gpu, GpuError, GpuTensor, allocating, read_buffer, wait_idle};

/// Two timestamps (begin, end) and the buffers to read them.
pub(crate) struct Timer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
}

impl Timer {
    pub fn new(ctx: &Context) -> Timer {
        let device = &ctx.device;
        Timer {
            set: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("stats timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps resolve"),
                size: 16,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            read: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps read"),
                size: 16,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        }
    }

    pub fn pass_writes(&self) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        }
    }

    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..2, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, 16);
    }

    /// The time between the two timestamps of the last resolved submission.
    pub fn read(&self, ctx: &Context) -> Result<Duration, GpuError> {
        let b = read_buffer(&ctx.device, &self.read, 16)?;
        let t0 = u64::from_le_bytes(b[..8].try_into().unwrap());
        let t1 = u64::from_le_bytes(b[8..].try_into().unwrap());
        let ns = t1.saturating_sub(t0) as f64 * f64::from(ctx.queue.get_timestamp_period());
        Ok(Duration::from_secs_f64(ns * 1e-9))
    }
}

/// A device-to-device copy measurement.
#[derive(Clone, Copy, Debug)]
pub struct CopyTiming {
    /// Bytes copied per repetition (the traffic is twice that: read + write).
    pub bytes: u64,
    /// Fastest repetition.
    pub best: Duration,
    /// Mean over all repetitions.
    pub mean: Duration,
    /// Whether `best` and `mean` come from timestamp queries (else: wall clock around one
    /// submission per repetition).
    pub timestamped: bool,
    /// Wall clock per copy with all repetitions in one submission (a cross-check).
    pub wall: Duration,
}

impl Gpu {
    /// Times `reps` copies of `bytes` bytes between two device buffers (after one unmeasured
    /// warm-up copy).
    pub fn copy_bandwidth(&self, bytes: u64, reps: u32) -> Result<CopyTiming, GpuError> {
        let device = &self.ctx.device;
        let bytes = bytes.next_multiple_of(4).max(4);
        let (src, dst) = allocating(device, "copy benchmark buffers", || {
            let b = |usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("copy benchmark"),
                    size: bytes,
                    usage,
                    mapped_at_creation: false,
                })
            };
            (
                b(wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::STORAGE),
                b(wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE),
            )
        })?;
        let _guard = self.lock_state();
        let timer = self.timer.as_ref().filter(|_| self.ctx.encoder_timestamps);
        let mut times = Vec::with_capacity(reps as usize);
        for rep in 0..=reps {
            let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("copy benchmark"),
            });
            if let Some(tm) = timer {
                enc.write_timestamp(&tm.set, 0);
            }
            enc.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
            if let Some(tm) = timer {
                enc.write_timestamp(&tm.set, 1);
                tm.resolve(&mut enc);
            }
            let start = Instant::now();
            self.submit(enc);
            wait_idle(device)?;
            let wall = start.elapsed();
            let t = match timer {
                Some(tm) => tm.read(&self.ctx)?,
                None => wall,
            };
            if rep > 0 {
                times.push(t);
            }
        }
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("copy benchmark wall"),
        });
        for _ in 0..reps.max(1) {
            enc.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
        }
        let start = Instant::now();
        self.submit(enc);
        wait_idle(device)?;
        let wall = start.elapsed() / reps.max(1);
        Ok(CopyTiming {
            bytes,
            wall,
            best: times.iter().copied().min().unwrap_or_default(),
            mean: times.iter().sum::<Duration>() / reps.max(1),
            timestamped: timer.is_some(),
        })
    }

    /// Wall-clock time per reduction of an uploaded tensor: `reps` passes in one submission,
    /// waited for once, divided by `reps` (a cross-check of the timestamp figure).
    pub fn time_resident_wall(&self, t: &GpuTensor, reps: u32) -> Result<Duration, GpuError> {
        let device = &self.ctx.device;
        // Warm-up (and correctness of the path) first.
        self.partials_resident(t)?;
        let _guard = self.lock_state();
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("resident stats wall"),
        });
        for _ in 0..reps.max(1) {
            self.encode_resident(t, &mut enc, None);
        }
        let start = Instant::now();
        self.submit(enc);
        wait_idle(device)?;
        Ok(start.elapsed() / reps.max(1))
    }
}
