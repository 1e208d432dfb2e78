// Pair reduction over (bench, device) f32 arrays: error-rate counts, max/sum of errors and the
// fp32 ULP error, one record of RECORD_WORDS u32 per invocation (no shared memory, no barriers;
// the host folds the records in f64). Comparisons are ordered (false on NaN), as on the CPU;
// NaN is detected by bits because `x != x` is false in naga-compiled WGSL.

struct Params {
    n: u32,
    eps: f32,
    small_value: f32,
    atol_benchmark: f32,
    atol_threshold: f32,
    rtol: f32,
    bound: f32,
    // log2 of the ULP threshold (a power of two).
    ulp_thr_exp: i32,
    t_hund: f32,
    t_thou: f32,
    t_tenth: f32,
    // ULP mantissa bits, minimum exponent and the largest 2^t the bench dtype holds.
    ulp_mant: i32,
    ulp_emin: i32,
    t_max: i32,
    inf_bits: u32,
    // The device dtype's finite range for the inf/nan re-check.
    clip_max: f32,
}

@group(0) @binding(0) var<storage, read> bench: array<f32>;
@group(0) @binding(1) var<storage, read> dev: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;
// Per biased exponent: the lowest mantissa from which the bench dtype's log2 rounds up to the
// next integer (0x800000 = never).
@group(0) @binding(4) var<storage, read> log2_bump: array<u32, 256>;

const RECORD_WORDS: u32 = 30u;
const WG: u32 = 256u;

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u;
}

// Neumaier step: (sum, compensation) += x. The compensation is left alone once the sum is
// not finite, so an infinite sum stays infinite instead of turning NaN.
fn add2(acc: vec2<f32>, x: f32) -> vec2<f32> {
    let t = acc.x + x;
    if (!is_finite(t)) {
        return vec2<f32>(t, acc.y);
    }
    var c = acc.y;
    if (abs(acc.x) >= abs(x)) {
        c += (acc.x - t) + x;
    } else {
        c += (x - t) + acc.x;
    }
    return vec2<f32>(t, c);
}

fn total(acc: vec2<f32>) -> f32 {
    if (!is_finite(acc.x)) {
        return acc.x;
    }
    return acc.x + acc.y;
}

fn clip(x: f32) -> f32 {
    if (is_nan(x)) {
        return x;
    }
    return select(select(x, -params.clip_max, x < -params.clip_max), params.clip_max,
                  x > params.clip_max);
}

// msprobe's inf/nan re-check of one non-finite position with tolerance `tol`.
fn inf_nan_passes(b: f32, d: f32, abe: f32, tol: f32) -> bool {
    let gc = clip(b);
    let re = abs(clip(d) - gc) / abe;
    return re <= tol || (is_nan(d) && is_nan(gc));
}

@compute @workgroup_size(256)
fn pair_chunk(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * WG;
    var c: array<u32, 19>;
    for (var k = 0u; k < 19u; k++) {
        c[k] = 0u;
    }
    var max_abs = 0.0;
    var seen_abs = false;
    var sum_sq = vec2<f32>(0.0, 0.0);
    var max_rel = 0.0;
    var seen_rel = false;
    var rel_sum = vec2<f32>(0.0, 0.0);
    var inf_fail_rtol = 0u;
    var inf_fail_bound = 0u;
    var key_hi = 0u;
    var key_lo = 0u;
    var ulp_small = vec2<f32>(0.0, 0.0);
    var ulp_big = vec2<f32>(0.0, 0.0);
    for (var i = gid.x; i < params.n; i += stride) {
        let b = bench[i];
        let d = dev[i];
        let a = abs(d - b);
        let abs_b = abs(b);
        let abe = abs_b + params.eps;
        let r = a / abe;
        let finite = is_finite(d) && is_finite(b);
        let small = finite && abs_b <= params.small_value;
        let acc_small = finite && abs_b <= 1.0;
        c[0] += u32(r < params.t_hund);
        c[1] += u32(r < params.t_thou);
        c[2] += u32(r < params.t_tenth);
        c[3] += u32(!finite);
        if (!finite) {
            inf_fail_rtol += u32(!inf_nan_passes(b, d, abe, params.rtol));
            inf_fail_bound += u32(!inf_nan_passes(b, d, abe, params.bound));
        }
        c[4] += u32(small);
        c[5] += u32(small && a > params.atol_benchmark);
        c[6] += u32(small && a > params.atol_threshold);
        c[7] += u32(finite && !small && r > params.rtol);
        c[8] += u32(acc_small);
        c[9] += u32(acc_small && a > params.bound);
        c[10] += u32(finite && !acc_small);
        c[11] += u32(finite && !acc_small && r > params.bound);
        c[12] += u32(d > b);
        c[13] += u32(d < b);
        c[14] += u32(!(b == d));
        // Max |D-B|: NaN counted apart (min/max drop NaN on some drivers).
        c[17] += u32(is_nan(a));
        if (!seen_abs || a > max_abs) {
            if (!is_nan(a)) {
                max_abs = a;
                seen_abs = true;
            }
        }
        let masked = !finite || small;
        var rm = -1.0;
        if (!masked) {
            sum_sq = add2(sum_sq, a * a);
            rm = r;
        }
        if (!seen_rel || rm > max_rel) {
            max_rel = rm;
            seen_rel = true;
        }
        if (rm >= 0.0) {
            c[15] += 1u;
            rel_sum = add2(rel_sum, rm);
        }

        // ULP: |D - B| * 2^(p - E), E = max(floor(log2|B|), emin); the factor overflows to inf
        // in the bench dtype when p - E > t_max; non-finite B gives NaN.
        let bb = bitcast<u32>(b) & 0x7fffffffu;
        let ef = bb >> 23u;
        let bm = bb & 0x7fffffu;
        var e = 0;
        if (bb != 0u) {
            e = i32(ef) - 127;
            if (bm >= log2_bump[ef]) {
                e += 1;
            }
        }
        e = max(e, params.ulp_emin);
        let t = params.ulp_mant - e;
        let s = d - b;
        let sb = bitcast<u32>(s) & 0x7fffffffu;
        var u_nan = !is_finite(b) || is_nan(s);
        var u_inf = false;
        if (!u_nan) {
            if (t > params.t_max) {
                u_nan = sb == 0u;
                u_inf = sb != 0u;
            } else if (sb == 0x7f800000u) {
                u_inf = true;
            }
        }
        var hi = 0u;
        var lo = 0u;
        if (u_nan) {
            c[18] += 1u;
        } else if (u_inf) {
            hi = 0xffffffffu;
            c[16] += 1u;
            ulp_big = vec2<f32>(bitcast<f32>(params.inf_bits), 0.0);
        } else if (sb == 0u) {
            hi = 1u;
        } else {
            var ex = i32(sb >> 23u);
            var m = sb & 0x7fffffu;
            if (ex == 0) {
                let shift = countLeadingZeros(m) - 8u;
                m = (m << shift) & 0x7fffffu;
                ex = 1 - i32(shift);
            }
            let big_e = ex - 127 + t;
            hi = u32(big_e + 1024);
            lo = m;
            let mag = 1.0 + f32(m) * (1.0 / 8388608.0);
            // u > threshold, exact: the f32 difference rounds monotonically.
            let thr = params.ulp_thr_exp;
            c[16] += u32(big_e > thr || (big_e == thr && m > 0u));
            if (big_e >= 64) {
                ulp_big = add2(ulp_big, ldexp(mag, big_e - 160));
            } else {
                ulp_small = add2(ulp_small, ldexp(mag, big_e));
            }
        }
        if (hi > key_hi || (hi == key_hi && lo > key_lo)) {
            key_hi = hi;
            key_lo = lo;
        }
    }
    if (!seen_rel) {
        max_rel = -bitcast<f32>(params.inf_bits);
    }
    if (!seen_abs) {
        max_abs = -bitcast<f32>(params.inf_bits);
    }
    let o = gid.x * RECORD_WORDS;
    for (var k = 0u; k < 19u; k++) {
        out[o + k] = c[k];
    }
    out[o + 19u] = bitcast<u32>(max_abs);
    out[o + 20u] = bitcast<u32>(total(sum_sq));
    out[o + 21u] = bitcast<u32>(max_rel);
    out[o + 22u] = bitcast<u32>(total(rel_sum));
    out[o + 23u] = key_hi;
    out[o + 24u] = key_lo;
    out[o + 25u] = bitcast<u32>(total(ulp_small));
    out[o + 26u] = bitcast<u32>(total(ulp_big));
    out[o + 27u] = inf_fail_rtol;
    out[o + 28u] = inf_fail_bound;
    out[o + 29u] = 0u;
}
