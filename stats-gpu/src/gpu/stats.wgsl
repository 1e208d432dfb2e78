// Fused one-pass statistics over f32 / f16 / bf16 read as packed u32 words.
//
// Every invocation keeps an `Acc` (min, max, NaN/±inf counts and five compensated sums), the
// workgroup folds its 256 `Acc`s in shared memory and writes one 16-word record; the host folds
// the records in f64 (see `stats_kernel.rs`, which also states the error bound).
//
// Sums are split by magnitude so that nothing overflows or underflows f32 where the f64 reference
// stays exact enough:
//   s_mid  : x                 for finite |x| < 2^32
//   s_big  : x * 2^-80         for finite |x| >= 2^32
//   q_small: (x * 2^87)^2      for 0 < |x| < 2^-40 (slow path only)
//   q_mid  : x^2               for the rest below 2^32
//   q_big  : (x * 2^-80)^2     for finite |x| >= 2^32
// Each sum is a Neumaier pair (sum, compensation).
//
// Hot loop: a "block" is a few vec4<u32> words. Its plain f32 sum, sum of squares, min and max
// are computed without any per-element classification; only when the block's sum of squares is
// not in [2^-100, 2^64) (which catches NaN, ±inf, |x| >= 2^32 and all-tiny blocks) do we redo the
// block element by element. NaN is detected by bits, never by `x != x` (naga emits an ordered
// compare) nor through min/max (which drop or mangle NaN depending on the driver).

const WG: u32 = 256u;
const KIND_F32: u32 = 0u;
const KIND_F16: u32 = 1u;
const KIND_BF16: u32 = 2u;
// Element type of the streaming entry point; the batch entry point reads it per task.
override KIND: u32 = 0u;

struct Params {
    // Whole vec4<u32> words in this chunk.
    n_words: u32,
    // Elements in the one partial word after them (0 when none).
    tail_elems: u32,
    // Record index of this dispatch's workgroup 0.
    out_base: u32,
    // 0x7f800000; WGSL forbids infinite constants.
    inf_bits: u32,
}

struct BatchParams {
    n_tasks: u32,
    inf_bits: u32,
    _pad0: u32,
    _pad1: u32,
}

struct Acc {
    mn: f32,
    mx: f32,
    nan: u32,
    pinf: u32,
    ninf: u32,
    // (sum, compensation) pairs.
    s_mid: vec2<f32>,
    s_big: vec2<f32>,
    q_small: vec2<f32>,
    q_mid: vec2<f32>,
    q_big: vec2<f32>,
}

struct Blk {
    s: f32,
    q: f32,
    mn: f32,
    mx: f32,
}

@group(0) @binding(0) var<storage, read> data: array<vec4<u32>>;
// 4 vec4<u32> per record.
@group(0) @binding(1) var<storage, read_write> out: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> params: Params;

@group(0) @binding(3) var<storage, read> b_data: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> b_out: array<vec4<u32>>;
@group(0) @binding(5) var<uniform> b_params: BatchParams;
// Per task: word offset, whole words, tail elements, element kind.
@group(0) @binding(6) var<storage, read> b_tasks: array<vec4<u32>>;

var<workgroup> red: array<Acc, WG>;

fn acc_new(inf: f32) -> Acc {
    let z = vec2<f32>(0.0);
    return Acc(inf, -inf, 0u, 0u, 0u, z, z, z, z, z);
}

// 1.0, from the length of the entry point's data binding, which no shader compiler can know
// (set first thing in each entry point; see `opaque`).
var<private> one: f32;

// x, hidden from the shader compiler, so that the error-free addition below is not simplified
// away by value-changing algebra (Mesa's NIR folds a - (a + y) into -y for inexact ops, as
// found for pair.wgsl on lavapipe). A uniform 1.0 would not do: lavapipe inlines uniforms.
fn opaque(x: f32) -> f32 {
    return x * one;
}

// Neumaier: (s, c) + y with the rounding error of the addition kept in c. (Values, not
// pointers to struct members: naga 30's SPIR-V writer fails on those as call arguments.)
fn nadd(p: vec2<f32>, y: f32) -> vec2<f32> {
    let a = p.x;
    let t = opaque(a + y);
    let e = select((y - t) + a, (a - t) + y, abs(a) >= abs(y));
    return vec2<f32>(t, p.y + e);
}

fn blk4(v: vec4<f32>) -> Blk {
    let s = (v.x + v.y) + (v.z + v.w);
    let q = fma(v.x, v.x, v.y * v.y) + fma(v.z, v.z, v.w * v.w);
    let mn = min(min(v.x, v.y), min(v.z, v.w));
    let mx = max(max(v.x, v.y), max(v.z, v.w));
    return Blk(s, q, mn, mx);
}

fn blk_join(a: Blk, b: Blk) -> Blk {
    return Blk(a.s + b.s, a.q + b.q, min(a.mn, b.mn), max(a.mx, b.mx));
}

fn lo_f16(w: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x).x, unpack2x16float(w.y).x, unpack2x16float(w.z).x, unpack2x16float(w.w).x);
}

fn hi_f16(w: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x).y, unpack2x16float(w.y).y, unpack2x16float(w.z).y, unpack2x16float(w.w).y);
}

// The 4 (f32) or 8 (16-bit) values of one word, as a block.
fn blk_word(w: vec4<u32>, kind: u32) -> Blk {
    if kind == KIND_F32 {
        return blk4(bitcast<vec4<f32>>(w));
    }
    if kind == KIND_F16 {
        return blk_join(blk4(lo_f16(w)), blk4(hi_f16(w)));
    }
    return blk_join(blk4(bitcast<vec4<f32>>(w << vec4<u32>(16u))), blk4(bitcast<vec4<f32>>(w & vec4<u32>(0xffff0000u))));
}

// Element i of word w (i < 4 for f32, < 8 for 16-bit types).
fn elem(w: vec4<u32>, i: u32, kind: u32) -> f32 {
    if kind == KIND_F32 {
        return bitcast<f32>(w[i]);
    }
    let u = w[i >> 1u];
    let odd = (i & 1u) == 1u;
    if kind == KIND_F16 {
        let h = unpack2x16float(u);
        return select(h.x, h.y, odd);
    }
    return bitcast<f32>(select(u << 16u, u & 0xffff0000u, odd));
}

fn push_elem(acc: ptr<function, Acc>, x: f32) {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if a > 0x7f800000u {
        (*acc).nan += 1u;
        return;
    }
    (*acc).mn = min((*acc).mn, x);
    (*acc).mx = max((*acc).mx, x);
    if a == 0x7f800000u {
        if b == a {
            (*acc).pinf += 1u;
        } else {
            (*acc).ninf += 1u;
        }
        return;
    }
    if a >= 0x4f800000u {
        // |x| >= 2^32: scale so that squares of up to 2^31 values stay below f32::MAX.
        let y = x * 0x1p-80f;
        (*acc).s_big = nadd((*acc).s_big, y);
        (*acc).q_big = nadd((*acc).q_big, y * y);
        return;
    }
    (*acc).s_mid = nadd((*acc).s_mid, x);
    if a < 0x2b800000u {
        // |x| < 2^-40: scale so that the squares of subnormals stay normal.
        let y = x * 0x1p87f;
        (*acc).q_small = nadd((*acc).q_small, y * y);
    } else {
        (*acc).q_mid = nadd((*acc).q_mid, x * x);
    }
}

// The first `n` elements of word w, one by one.
fn slow_word(acc: ptr<function, Acc>, w: vec4<u32>, n: u32, kind: u32) {
    for (var i = 0u; i < n; i += 1u) {
        push_elem(acc, elem(w, i, kind));
    }
}

fn per_word(kind: u32) -> u32 {
    return select(8u, 4u, kind == KIND_F32);
}

// Fast path for a block whose values are all finite and below 2^32 in magnitude and whose sum of
// squares is not tiny; returns false (having done nothing) otherwise.
fn try_fast(acc: ptr<function, Acc>, b: Blk) -> bool {
    if b.q < 0x1p64f && b.q >= 0x1p-100f {
        (*acc).mn = min((*acc).mn, b.mn);
        (*acc).mx = max((*acc).mx, b.mx);
        (*acc).s_mid = nadd((*acc).s_mid, b.s);
        (*acc).q_mid = nadd((*acc).q_mid, b.q);
        return true;
    }
    // All zeros (the ordered compare is false for NaN).
    if b.q == 0.0 && b.mn == 0.0 && b.mx == 0.0 {
        (*acc).mn = min((*acc).mn, b.mn);
        (*acc).mx = max((*acc).mx, b.mx);
        return true;
    }
    return false;
}

fn word1(acc: ptr<function, Acc>, w: vec4<u32>, kind: u32) {
    if !try_fast(acc, blk_word(w, kind)) {
        slow_word(acc, w, per_word(kind), kind);
    }
}

fn word4(acc: ptr<function, Acc>, w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, kind: u32) {
    let b = blk_join(blk_join(blk_word(w0, kind), blk_word(w1, kind)), blk_join(blk_word(w2, kind), blk_word(w3, kind)));
    if !try_fast(acc, b) {
        let n = per_word(kind);
        slow_word(acc, w0, n, kind);
        slow_word(acc, w1, n, kind);
        slow_word(acc, w2, n, kind);
        slow_word(acc, w3, n, kind);
    }
}

// Sum of two (sum, compensation) pairs.
fn pair_add(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let r = nadd(a, b.x);
    return vec2<f32>(r.x, r.y + b.y);
}

fn acc_merge(a: Acc, b: Acc) -> Acc {
    var r = a;
    r.mn = min(a.mn, b.mn);
    r.mx = max(a.mx, b.mx);
    r.nan = a.nan + b.nan;
    r.pinf = a.pinf + b.pinf;
    r.ninf = a.ninf + b.ninf;
    r.s_mid = pair_add(a.s_mid, b.s_mid);
    r.s_big = pair_add(a.s_big, b.s_big);
    r.q_small = pair_add(a.q_small, b.q_small);
    r.q_mid = pair_add(a.q_mid, b.q_mid);
    r.q_big = pair_add(a.q_big, b.q_big);
    return r;
}

// Folds the workgroup's accumulators; the result is in red[0] for every invocation to see.
fn reduce(lid: u32, acc: Acc) {
    red[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if lid < stride {
            red[lid] = acc_merge(red[lid], red[lid + stride]);
        }
        workgroupBarrier();
    }
}

fn record(a: Acc) -> array<vec4<u32>, 4> {
    return array<vec4<u32>, 4>(
        vec4<u32>(bitcast<u32>(a.mn), bitcast<u32>(a.mx), a.nan, a.pinf),
        vec4<u32>(a.ninf, bitcast<u32>(a.s_mid.x), bitcast<u32>(a.s_mid.y), bitcast<u32>(a.s_big.x)),
        vec4<u32>(bitcast<u32>(a.s_big.y), bitcast<u32>(a.q_small.x), bitcast<u32>(a.q_small.y), bitcast<u32>(a.q_mid.x)),
        vec4<u32>(bitcast<u32>(a.q_mid.y), bitcast<u32>(a.q_big.x), bitcast<u32>(a.q_big.y), 0u),
    );
}

// One chunk of one tensor: grid-stride over whole words, four loads in flight per iteration.
@compute @workgroup_size(256)
fn stats_chunk(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    // A bound buffer holds at least one word.
    one = f32(min(arrayLength(&data), 1u));
    let inf = bitcast<f32>(params.inf_bits);
    var acc = acc_new(inf);
    let g = nwg.x * WG;
    let n = params.n_words;
    let gid = wid.x * WG + lid;
    var i = gid;
    // i + 3g < n, written so that it cannot wrap (n < 2^28).
    loop {
        if i >= n || n - i <= 3u * g {
            break;
        }
        word4(&acc, data[i], data[i + g], data[i + 2u * g], data[i + 3u * g], KIND);
        i += 4u * g;
    }
    loop {
        if i >= n {
            break;
        }
        word1(&acc, data[i], KIND);
        i += g;
    }
    if gid == 0u && params.tail_elems > 0u {
        slow_word(&acc, data[n], params.tail_elems, KIND);
    }
    reduce(lid, acc);
    if lid == 0u {
        let r = record(red[0]);
        let o = (params.out_base + wid.x) * 4u;
        out[o] = r[0];
        out[o + 1u] = r[1];
        out[o + 2u] = r[2];
        out[o + 3u] = r[3];
    }
}

// Invocations per batch task: a workgroup reduces WG / SEG tasks at once, so that its barriers
// are shared by several small tensors.
const SEG: u32 = 32u;

// Folds each SEG-invocation segment's accumulators; segment s's result ends in red[s * SEG].
fn reduce_segments(lid: u32, acc: Acc) {
    red[lid] = acc;
    workgroupBarrier();
    let lane = lid % SEG;
    for (var stride = SEG / 2u; stride > 0u; stride >>= 1u) {
        if lane < stride {
            red[lid] = acc_merge(red[lid], red[lid + stride]);
        }
        workgroupBarrier();
    }
}

// Many small tensors packed in one buffer: a task is a stretch of at most a few thousand words
// of one tensor; each SEG-invocation segment of a workgroup takes one task, and the workgroups
// loop over the tasks. One record per task.
@compute @workgroup_size(256)
fn stats_batch(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    one = f32(min(arrayLength(&b_data), 1u));
    let inf = bitcast<f32>(b_params.inf_bits);
    let n_tasks = b_params.n_tasks;
    let per_wg = WG / SEG;
    let seg = lid / SEG;
    let lane = lid % SEG;
    for (var first = wid.x * per_wg; first < n_tasks; first += nwg.x * per_wg) {
        let task = first + seg;
        var acc = acc_new(inf);
        if task < n_tasks {
            let t = b_tasks[task];
            let base = t.x;
            let n = t.y;
            let kind = t.w;
            var i = lane;
            loop {
                if i >= n || n - i <= 3u * SEG {
                    break;
                }
                word4(&acc, b_data[base + i], b_data[base + i + SEG], b_data[base + i + 2u * SEG], b_data[base + i + 3u * SEG], kind);
                i += 4u * SEG;
            }
            loop {
                if i >= n {
                    break;
                }
                word1(&acc, b_data[base + i], kind);
                i += SEG;
            }
            if lane == 0u && t.z > 0u {
                slow_word(&acc, b_data[base + n], t.z, kind);
            }
        }
        reduce_segments(lid, acc);
        if lane == 0u && task < n_tasks {
            let r = record(red[lid]);
            let o = task * 4u;
            b_out[o] = r[0];
            b_out[o + 1u] = r[1];
            b_out[o + 2u] = r[2];
            b_out[o + 3u] = r[3];
        }
        // The records are read from red before the next round overwrites it.
        workgroupBarrier();
    }
}
