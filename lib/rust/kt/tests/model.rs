//! The shipped tiny model (examples/kt-tiny-moe, a qwen3moe with a BPE vocabulary) through the safe API: metadata,
//! tokenizer round trips, greedy generation (reproducible, streamed, the same from two threads sharing the model),
//! the streaming detokenizer, and errors that carry kt's status and message.
use kt::{Context, ContextParams, Detokenizer, Error, Logits, Model, Sampler, StopReason};
use std::path::PathBuf;

fn model_path() -> PathBuf {
    std::env::var_os("KT_TEST_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/kt-tiny-moe/kt-tiny-moe.q8_0.gguf"))
    })
}

fn params() -> ContextParams {
    ContextParams { n_threads: 2, n_ctx: 128, ..ContextParams::default() }
}

const PROMPT: &str = "And God said";

#[test]
fn metadata_and_tensors() {
    let m = Model::load(model_path()).unwrap();
    assert_eq!(m.architecture(), "qwen3moe");
    assert_eq!(m.gguf_version(), 3);
    let layers = m.meta_int("qwen3moe.block_count").unwrap();
    assert!(layers >= 1);
    assert!(m.meta_keys().unwrap().iter().any(|k| k == "general.architecture"));
    let i = m.tensor_find("blk.0.ffn_down_exps.weight").unwrap();
    let info = m.tensor_info(i).unwrap();
    assert_eq!(info.ne.len(), 3);
    assert_eq!(info.ne[2], m.meta_int("qwen3moe.expert_count").unwrap());
    let values = m.tensor_f32(i).unwrap();
    assert_eq!(values.len() as u64, info.n_elements);
    assert!(values.iter().all(|v| v.is_finite()));
}

#[test]
fn errors_carry_status_and_message() {
    let missing = std::env::temp_dir().join("kt-rust-no-such-model.gguf");
    let e: Error = Model::load(&missing).unwrap_err();
    assert_eq!(e.status(), kt::sys::KT_STATUS_IO_ERROR);
    assert!(e.message().contains("kt-rust-no-such-model.gguf"), "{}", e);
    let m = Model::load(model_path()).unwrap();
    let e = m.meta_int("no.such.key").unwrap_err();
    assert_eq!(e.status(), kt::sys::KT_STATUS_NOT_FOUND);
    assert!(e.message().contains("no.such.key"), "{}", e);
    let e = m.tensor_find("no.such.tensor").unwrap_err();
    assert!(e.to_string().contains("not found"), "{}", e);
    let mut ctx = Context::new(&m, &params()).unwrap();
    let e = ctx.decode(&[1 << 30], Logits::Last).unwrap_err();
    assert_eq!(e.status(), kt::sys::KT_STATUS_INVALID_ARGUMENT);
    assert!(e.message().contains("vocabulary"), "{}", e);
    assert_eq!(ctx.n_past(), 0); // all or nothing
}

#[test]
fn tokenizer_round_trips() {
    let m = Model::load(model_path()).unwrap();
    let tok = m.tokenizer();
    let info = tok.vocab_info().unwrap();
    assert_eq!(info.kind, kt::sys::KT_VOCAB_BPE);
    assert!(info.n_tokens > 256);
    let text = "In the beginning God created the heaven and the earth.";
    let ids = tok.tokenize(text, false, false).unwrap();
    assert!(!ids.is_empty() && ids.len() < text.len());
    assert_eq!(tok.detokenize(&ids, false, false).unwrap(), text);
    let pieces: Vec<u8> = ids.iter().flat_map(|&t| tok.token_to_piece(t, false).unwrap()).collect();
    assert_eq!(pieces, text.as_bytes());
    assert!(ids.iter().all(|&t| !tok.is_eog(t).unwrap()));
}

fn generate(m: &Model, n: usize) -> Vec<i32> {
    let ids = m.tokenizer().tokenize(PROMPT, true, true).unwrap();
    let mut ctx = Context::new(m, &params()).unwrap();
    let mut streamed = Vec::new();
    let g = ctx
        .generate(&ids, n, None, &[], |t| {
            streamed.push(t);
            true
        })
        .unwrap();
    assert_eq!(g.tokens, streamed);
    assert_eq!(g.stop, StopReason::MaxTokens);
    assert_eq!(ctx.n_past() as usize, ids.len() + n);
    g.tokens
}

#[test]
fn greedy_generation_is_reproducible_and_matches_decode_and_argmax() {
    let m = Model::load(model_path()).unwrap();
    let a = generate(&m, 12);
    assert_eq!(a, generate(&m, 12));
    // The same first token by hand: decode the prompt, take the argmax of the last logits.
    let ids = m.tokenizer().tokenize(PROMPT, true, true).unwrap();
    let mut ctx = Context::new(&m, &params()).unwrap();
    ctx.decode(&ids, Logits::Last).unwrap();
    let logits = ctx.logits(-1).unwrap();
    assert_eq!(logits.len(), ctx.n_vocab());
    assert!(logits.iter().all(|v| v.is_finite()));
    let argmax = logits.iter().enumerate().fold(0, |best, (i, &v)| if v > logits[best] { i } else { best });
    assert_eq!(argmax as i32, a[0]);
    assert_eq!(ctx.sample(Some(&Sampler::greedy())).unwrap(), a[0]);
    let perf = ctx.perf().unwrap();
    assert_eq!(perf.n_prefill_tokens as usize, ids.len());
}

#[test]
fn a_callback_stops_generation_and_sampling_is_seeded() {
    let m = Model::load(model_path()).unwrap();
    let ids = m.tokenizer().tokenize(PROMPT, true, true).unwrap();
    let mut ctx = Context::new(&m, &params()).unwrap();
    let mut n = 0;
    let g = ctx
        .generate(&ids, 50, None, &[], |_| {
            n += 1;
            n < 3
        })
        .unwrap();
    assert_eq!((g.tokens.len(), g.stop), (3, StopReason::Callback));
    // A panic in the callback stops kt and comes back to the caller, not through kt's C frames.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = ctx.generate(&[], 10, None, &[], |_| panic!("from on_token"));
    }));
    assert_eq!(*panicked.unwrap_err().downcast::<&str>().unwrap(), "from on_token");
    let sampler = Sampler::default().temperature(0.9).seed(42);
    let draw = || {
        let mut c = Context::new(&m, &params()).unwrap();
        c.generate(&ids, 10, Some(&sampler), &[], |_| true).unwrap().tokens
    };
    assert_eq!(draw(), draw());
}

#[test]
fn threads_share_a_model_and_agree() {
    let m = Model::load(model_path()).unwrap();
    let expected = generate(&m, 8);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2).map(|_| s.spawn(|| generate(&m, 8))).collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), expected);
        }
    });
}

#[test]
fn streaming_detokenizer_concatenates_to_the_text() {
    let m = Model::load(model_path()).unwrap();
    let tokens = generate(&m, 20);
    let mut d = Detokenizer::new(&m, false).unwrap();
    let mut bytes = Vec::new();
    for &t in &tokens {
        let piece = d.push(t).unwrap();
        assert!(std::str::from_utf8(&piece).is_ok(), "a piece split a character");
        bytes.extend(piece);
    }
    bytes.extend(d.flush().unwrap());
    assert_eq!(String::from_utf8(bytes).unwrap(), m.tokenizer().detokenize(&tokens, false, false).unwrap());
}
