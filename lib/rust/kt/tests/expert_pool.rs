//! Expert pools against a plain-Rust MoE FFN in f64: random weights in each packed format, the synchronous and the
//! queued calls, accumulation, masks and empty slots, a layer of the shipped model, and several threads sharing a
//! pool.
use kt::{ExpertPool, ExpertPoolParams, Job, Model, WeightFormat, Weights};
use std::path::PathBuf;

const E: usize = 6;
const H: usize = 64;
const I: usize = 96;
const K: usize = 2;

/// xorshift64*: deterministic test data without a crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let u = (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32;
        2.0 * u - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

struct Layer {
    gate: Vec<f32>, // [E][I][H]
    up: Vec<f32>,   // [E][I][H]
    down: Vec<f32>, // [E][H][I]
}

fn layer(seed: u64) -> Layer {
    let mut r = Rng(seed);
    Layer { gate: r.vec(E * I * H, 0.2), up: r.vec(E * I * H, 0.2), down: r.vec(E * H * I, 0.2) }
}

/// out[t] = sum_k w[t][k] * down_e(silu(gate_e x[t]) * up_e x[t]), e = ids[t][k], skipping -1 and masked experts.
fn reference(l: &Layer, x: &[f32], ids: &[i32], w: &[f32], masked: &[bool], hidden: usize, inter: usize) -> Vec<f64> {
    let n = x.len() / hidden;
    let mut out = vec![0f64; n * hidden];
    for t in 0..n {
        let xt = &x[t * hidden..(t + 1) * hidden];
        for k in 0..K {
            let e = ids[t * K + k];
            if e < 0 || masked[e as usize] {
                continue;
            }
            let e = e as usize;
            let mut h = vec![0f64; inter];
            for (i, hi) in h.iter_mut().enumerate() {
                let row = (e * inter + i) * hidden;
                let g: f64 = (0..hidden).map(|j| l.gate[row + j] as f64 * xt[j] as f64).sum();
                let u: f64 = (0..hidden).map(|j| l.up[row + j] as f64 * xt[j] as f64).sum();
                *hi = g / (1.0 + (-g).exp()) * u;
            }
            for j in 0..hidden {
                let row = (e * hidden + j) * inter;
                let d: f64 = (0..inter).map(|i| l.down[row + i] as f64 * h[i]).sum();
                out[t * hidden + j] += w[t * K + k] as f64 * d;
            }
        }
    }
    out
}

/// max |a - b| relative to max |b|.
fn rel_error(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((*x as f64 - y).abs())) / scale
}

fn routing(n: usize, seed: u64) -> (Vec<i32>, Vec<f32>) {
    let mut r = Rng(seed);
    let mut ids = Vec::new();
    let mut w = Vec::new();
    for t in 0..n {
        let a = ((r.next() + 1.0) * 0.5 * E as f32) as i32 % E as i32;
        let b = (a + 1 + t as i32 % (E as i32 - 1)) % E as i32;
        ids.extend([a, if t % 5 == 4 { -1 } else { b }]); // every fifth token has an empty slot
        let p = 0.25 + 0.5 * (r.next() + 1.0) * 0.5;
        w.extend([p, 1.0 - p]);
    }
    (ids, w)
}

fn pool(format: WeightFormat) -> ExpertPool {
    ExpertPool::new(&ExpertPoolParams {
        n_experts: E as i32,
        hidden_size: H as i32,
        intermediate_size: I as i32,
        weight_format: format,
        n_threads: 2,
        ..ExpertPoolParams::default()
    })
    .unwrap()
}

#[test]
fn every_format_matches_the_reference() {
    let l = layer(1);
    // Tolerances: bf16 rounds weights and activations to 8 bits of mantissa; int8 quantizes both per channel / per
    // token; int4 keeps 4 bits per weight with a scale per 32.
    for (format, tolerance) in [
        (WeightFormat::Bf16, 0.02),
        (WeightFormat::Int8, 0.03),
        (WeightFormat::Int4 { group: 32 }, 0.15),
        (WeightFormat::AsSource, 0.02), // f32 source: kept as bf16
    ] {
        let p = pool(format);
        p.load(Weights::f32(&l.gate), Weights::f32(&l.up), Weights::f32(&l.down)).unwrap();
        for n in [1usize, 7, 33] {
            let x = Rng(n as u64 + 10).vec(n * H, 1.0);
            let (ids, w) = routing(n, n as u64);
            let mut y = vec![0f32; n * H];
            p.forward(&x, &ids, &w, K, &mut y, false).unwrap();
            let err = rel_error(&y, &reference(&l, &x, &ids, &w, &[false; E], H, I));
            assert!(err < tolerance, "{:?}, {} tokens: relative error {}", format, n, err);
        }
        assert!(p.info().unwrap().loaded);
    }
}

#[test]
fn queued_jobs_accumulation_and_masks() {
    let l = layer(2);
    let p = pool(WeightFormat::Bf16);
    p.load(Weights::f32(&l.gate), Weights::f32(&l.up), Weights::f32(&l.down)).unwrap();
    let n = 9;
    let x = Rng(3).vec(n * H, 1.0);
    let (ids, w) = routing(n, 4);
    let want = reference(&l, &x, &ids, &w, &[false; E], H, I);

    // Two jobs in flight at once; each gets its own output back.
    let a = p
        .submit(Job {
            input: x.clone(),
            ids: ids.clone(),
            weights: w.clone(),
            output: vec![0.0; n * H],
            top_k: K,
            accumulate: false,
        })
        .unwrap();
    let b = p
        .submit(Job {
            input: x.clone(),
            ids: ids.clone(),
            weights: w.clone(),
            output: vec![1.0; n * H],
            top_k: K,
            accumulate: true,
        })
        .unwrap();
    let ya = a.wait().unwrap().output;
    let yb = b.wait().unwrap().output;
    assert!(rel_error(&ya, &want) < 0.02);
    let shifted: Vec<f64> = want.iter().map(|v| v + 1.0).collect();
    assert!(rel_error(&yb, &shifted) < 0.02);

    // Experts 1 and 4 computed elsewhere: they add nothing.
    let mut mask = [false; E];
    mask[1] = true;
    mask[4] = true;
    p.set_mask(Some(&mask)).unwrap();
    let mut y = vec![0f32; n * H];
    p.forward(&x, &ids, &w, K, &mut y, false).unwrap();
    assert!(rel_error(&y, &reference(&l, &x, &ids, &w, &mask, H, I)) < 0.02);
    p.set_mask(None).unwrap();
}

#[test]
fn wrong_shapes_and_ids_are_errors_not_reads_past_a_buffer() {
    let l = layer(5);
    let p = pool(WeightFormat::Int8);
    let e = p.load(Weights::f32(&l.gate[1..]), Weights::f32(&l.up), Weights::f32(&l.down)).unwrap_err();
    assert_eq!(e.status(), kt::sys::KT_STATUS_INVALID_ARGUMENT);
    let x = vec![0f32; 2 * H];
    let mut y = vec![0f32; 2 * H];
    let e = p.forward(&x, &[0, 1, 2, 3], &[1.0; 4], K, &mut y, false).unwrap_err();
    assert_eq!(e.status(), kt::sys::KT_STATUS_MISUSE, "{}", e); // no weights yet: kt's own check
    p.load(Weights::f32(&l.gate), Weights::f32(&l.up), Weights::f32(&l.down)).unwrap();
    let e = p.forward(&x, &[0, 1, 2, E as i32], &[1.0; 4], K, &mut y, false).unwrap_err();
    assert!(e.message().contains("out of range"), "{}", e);
    assert!(p.forward(&x, &[0, 1, 2], &[1.0; 3], K, &mut y, false).is_err());
}

#[test]
fn threads_share_a_pool() {
    let l = layer(6);
    let p = pool(WeightFormat::Bf16);
    p.load(Weights::f32(&l.gate), Weights::f32(&l.up), Weights::f32(&l.down)).unwrap();
    std::thread::scope(|s| {
        for seed in 0..3u64 {
            let (p, l) = (&p, &l);
            s.spawn(move || {
                for round in 0..5 {
                    let n = 1 + (seed as usize + round) % 6;
                    let x = Rng(100 + seed * 10 + round as u64).vec(n * H, 1.0);
                    let (ids, w) = routing(n, seed + round as u64);
                    let mut y = vec![0f32; n * H];
                    p.forward(&x, &ids, &w, K, &mut y, false).unwrap();
                    assert!(rel_error(&y, &reference(l, &x, &ids, &w, &[false; E], H, I)) < 0.02);
                }
            });
        }
    });
}

#[test]
fn a_layer_of_the_shipped_model() {
    let path = std::env::var_os("KT_TEST_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/kt-tiny-moe/kt-tiny-moe.q8_0.gguf"))
    });
    let m = Model::load(path).unwrap();
    let n_experts = m.meta_int("qwen3moe.expert_count").unwrap() as usize;
    let hidden = m.meta_int("qwen3moe.embedding_length").unwrap() as usize;
    let inter = m.meta_int("qwen3moe.expert_feed_forward_length").unwrap() as usize;
    let read = |name: &str| m.tensor_f32(m.tensor_find(name).unwrap()).unwrap();
    // The Q8_0 weights as kt dequantizes them (bit-exact with ggml; tested by kt's golden tests).
    let l = Layer {
        gate: read("blk.0.ffn_gate_exps.weight"),
        up: read("blk.0.ffn_up_exps.weight"),
        down: read("blk.0.ffn_down_exps.weight"),
    };
    let p = ExpertPool::new(&ExpertPoolParams {
        n_experts: n_experts as i32,
        hidden_size: hidden as i32,
        intermediate_size: inter as i32,
        n_threads: 2,
        ..ExpertPoolParams::default()
    })
    .unwrap();
    p.load_model(&m, 0).unwrap();
    assert!(p.info().unwrap().weight_formats.contains("Q8_0"));
    let n = 5;
    let x = Rng(9).vec(n * hidden, 1.0);
    let ids: Vec<i32> = (0..n * K).map(|i| (i * 3 % n_experts) as i32).collect();
    let w: Vec<f32> = (0..n * K).map(|i| if i % 2 == 0 { 0.6 } else { 0.4 }).collect();
    let mut y = vec![0f32; n * hidden];
    p.forward(&x, &ids, &w, K, &mut y, false).unwrap();
    // Q8_0 weights computed with int8-quantized activations.
    let err = rel_error(&y, &reference(&l, &x, &ids, &w, &vec![false; n_experts], hidden, inter));
    assert!(err < 0.03, "relative error {}", err);
}
