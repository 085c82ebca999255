//! GgufWriter: a file written from Rust reads back through Model with the same metadata and tensors; bad entries
//! are refused with kt's message; an architecture's tensor table is listed; quantize/dequantize round trips.
use kt::{types, GgufWriter, Model};

#[test]
fn a_written_file_reads_back() {
    let dir = std::env::temp_dir().join(format!("kt-rust-writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    let a: Vec<f32> = (0..3 * 64).map(|i| i as f32 / 16.0 - 6.0).collect();
    let mut w = GgufWriter::new(0).unwrap();
    w.set_string("general.architecture", "test").unwrap();
    w.set_u32("test.u32", 7).unwrap();
    w.set_f32("test.f32", 0.5).unwrap();
    w.set_bool("test.flag", true).unwrap();
    w.set_array_string("test.names", &["a", "Ġb", ""]).unwrap();
    w.set_array_i32("test.ids", &[-1, 2, 3]).unwrap();
    w.add_tensor_f32("a", types::F32, &[64, 3], &a).unwrap();
    w.add_tensor_f32("q", types::Q8_0, &[64, 3], &a).unwrap();
    let e = w.set_u32("test.u32", 8).unwrap_err();
    assert!(e.message().contains("test.u32"), "{}", e);
    w.write(&path).unwrap();

    let m = Model::load(&path).unwrap();
    assert_eq!(m.architecture(), "test");
    assert_eq!(m.meta_int("test.u32").unwrap(), 7);
    assert_eq!(m.meta_float("test.f32").unwrap(), 0.5);
    assert_eq!(m.meta_int("test.flag").unwrap(), 1);
    assert_eq!(m.meta_array_len("test.names").unwrap(), 3);
    let ia = m.tensor_find("a").unwrap();
    assert_eq!(m.tensor_info(ia).unwrap().ne, vec![64, 3]);
    assert_eq!(m.tensor_f32(ia).unwrap(), a);
    let q = m.tensor_f32(m.tensor_find("q").unwrap()).unwrap();
    assert_eq!(q, kt::dequantize(types::Q8_0, &kt::quantize(types::Q8_0, &a, 64).unwrap(), 3, 64).unwrap());
    // Q8_0 keeps every value within half a step of its block's scale (max |x| / 127).
    for (block_a, block_q) in a.chunks(32).zip(q.chunks(32)) {
        let step = block_a.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        assert!(block_a.iter().zip(block_q).all(|(x, y)| (x - y).abs() <= 0.51 * step + 1e-6));
    }
    drop(m);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_are_errors() {
    assert_eq!(GgufWriter::new(24).unwrap_err().status(), kt::sys::KT_STATUS_INVALID_ARGUMENT);
    let mut w = GgufWriter::new(0).unwrap();
    let e = w.add_tensor("t", types::Q8_0, &[33, 2], &[0u8; 10]).unwrap_err();
    assert_eq!(e.status(), kt::sys::KT_STATUS_INVALID_ARGUMENT);
    assert!(kt::quantize(types::Q8_0, &[0.0; 33], 33).is_err());
}

#[test]
fn expected_tensors_of_an_architecture() {
    let mut w = GgufWriter::new(0).unwrap();
    w.set_string("general.architecture", "qwen3moe").unwrap();
    for (key, value) in [
        ("embedding_length", 16),
        ("block_count", 2),
        ("feed_forward_length", 16),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 2),
        ("expert_count", 4),
        ("expert_used_count", 2),
        ("vocab_size", 32),
        ("context_length", 64),
    ] {
        w.set_u32(&format!("qwen3moe.{}", key), value).unwrap();
    }
    w.set_f32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6).unwrap();
    let specs = w.expected_tensors().unwrap();
    let experts = specs.iter().find(|s| s.name == "blk.1.ffn_gate_exps.weight").expect("the layer's experts");
    assert_eq!(experts.role, kt::sys::KT_TENSOR_ROLE_EXPERTS);
    assert_eq!(experts.ne[2], 4);
    assert!(specs.iter().any(|s| s.name == "token_embd.weight" && s.ne == vec![16, 32]));
}

#[test]
fn library_information() {
    assert_eq!(kt::version_number() / 1_000_000, kt::sys::KT_VERSION_MAJOR);
    assert!(kt::build_info().starts_with("kt "));
    assert_eq!(kt::type_name(types::Q4_K), Some("Q4_K"));
    assert_eq!(kt::type_name(4), None);
    assert_eq!(kt::status_string(kt::sys::KT_STATUS_NOT_FOUND), "not found");
}
