//! Writer → reader round trips: every value type, nested arrays, tensor data,
//! alignment (default and 64), versions 2 and 3; writer and getter errors.

use ggml_core::gguf::{GgufArray, GgufFile, GgufString, GgufValue, GgufValueType, GgufWriter};
use ggml_core::GgmlType;
use proptest::prelude::*;

fn all_values() -> Vec<(String, GgufValue)> {
    let v: Vec<(&str, GgufValue)> = vec![
        ("v.u8", GgufValue::U8(255)),
        ("v.i8", GgufValue::I8(-128)),
        ("v.u16", GgufValue::U16(65535)),
        ("v.i16", GgufValue::I16(-32768)),
        ("v.u32", GgufValue::U32(u32::MAX)),
        ("v.i32", GgufValue::I32(i32::MIN)),
        ("v.f32", GgufValue::F32(-0.1)),
        ("v.f32.nan", GgufValue::F32(f32::from_bits(0x7fc0_1234))),
        ("v.bool.t", GgufValue::Bool(true)),
        ("v.bool.f", GgufValue::Bool(false)),
        ("v.str", GgufValue::Str("Grüße ▁ 🙂".into())),
        ("v.str.empty", GgufValue::Str("".into())),
        (
            "v.str.raw",
            GgufValue::Str(GgufString::from_bytes(vec![0xff, 0xfe, 0])),
        ),
        ("v.u64", GgufValue::U64(u64::MAX)),
        ("v.i64", GgufValue::I64(i64::MIN)),
        ("v.f64", GgufValue::F64(std::f64::consts::PI)),
        ("a.u8", vec![0u8, 1, 255].into()),
        ("a.i8", vec![-1i8, 2].into()),
        ("a.u16", vec![7u16].into()),
        ("a.i16", vec![-7i16, 7].into()),
        ("a.u32", vec![1u32, 2, 3].into()),
        ("a.i32", vec![-1i32, 0, 1].into()),
        ("a.f32", vec![0.5f32, f32::INFINITY].into()),
        ("a.bool", vec![true, false, true].into()),
        ("a.str", vec!["<s>", "", "▁the"].into()),
        ("a.u64", vec![u64::MAX].into()),
        ("a.i64", vec![i64::MIN, 5].into()),
        ("a.f64", vec![1e300f64].into()),
        ("a.empty", GgufValue::Array(GgufArray::F32(vec![]))),
        ("a.empty.arr", GgufValue::Array(GgufArray::Array(vec![]))),
        (
            "a.nested",
            vec![
                GgufArray::I32(vec![1, 2]),
                GgufArray::Str(vec!["x".into(), GgufString::from_bytes(vec![0x80])]),
                GgufArray::Array(vec![
                    GgufArray::Bool(vec![true]),
                    GgufArray::Array(vec![GgufArray::F64(vec![2.5])]),
                ]),
                GgufArray::U8(vec![]),
            ]
            .into(),
        ),
    ];
    v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn tensors() -> Vec<(&'static str, Vec<i64>, GgmlType, Vec<u8>)> {
    vec![
        ("a.f32", vec![5, 3], GgmlType::F32, pattern(60, 1)),
        (
            "b.q4_0",
            vec![64, 2],
            GgmlType::Q4_0,
            pattern(2 * 2 * 18, 2),
        ),
        (
            "c.f16.4d",
            vec![2, 3, 4, 5],
            GgmlType::F16,
            pattern(2 * 120, 3),
        ),
        ("d.q6_k", vec![256], GgmlType::Q6K, pattern(210, 4)),
        ("e.empty", vec![0, 4], GgmlType::F32, vec![]),
        ("f.scalar", vec![], GgmlType::I32, pattern(4, 5)),
        ("g.i8", vec![7], GgmlType::I8, pattern(7, 6)),
    ]
}

fn build(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "test").unwrap();
    if let Some(a) = alignment {
        w.add_kv("general.alignment", a).unwrap();
    }
    for (k, v) in all_values() {
        w.add_kv(k, v).unwrap();
    }
    for (name, ne, ty, data) in tensors() {
        w.add_tensor(name, &ne, ty, data).unwrap();
    }
    w
}

fn check(bytes: Vec<u8>, alignment: usize) -> GgufFile {
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.alignment(), alignment);
    assert_eq!(f.data_offset() % alignment, 0);
    assert_eq!(bytes.len() % alignment, 0, "file ends padded");
    // values, in order, bit for bit (NaN payload included)
    let want = all_values();
    let got: Vec<_> = f
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("v.") || k.starts_with("a."))
        .cloned()
        .collect();
    assert_eq!(got.len(), want.len());
    for ((gk, gv), (wk, wv)) in got.iter().zip(&want) {
        assert_eq!(gk, wk);
        if let (GgufValue::F32(a), GgufValue::F32(b)) = (gv, wv) {
            assert_eq!(a.to_bits(), b.to_bits(), "{gk}");
        } else {
            assert_eq!(gv, wv, "{gk}");
        }
    }
    // tensors, in order
    let want = tensors();
    assert_eq!(f.tensors().len(), want.len());
    let mut prev_end = 0u64;
    for (t, (name, ne, ty, data)) in f.tensors().iter().zip(&want) {
        assert_eq!(t.name, *name);
        assert_eq!(t.shape(), &ne[..]);
        assert_eq!(t.n_dims as usize, ne.len());
        assert_eq!(t.ty, *ty);
        assert_eq!(t.offset % alignment as u64, 0, "{name}");
        assert!(t.offset >= prev_end, "{name}");
        prev_end = t.offset + t.size as u64;
        assert_eq!(f.tensor_data(t), &data[..], "{name}");
        assert_eq!(f.tensor(name), Some(t));
    }
    // and back again, identically
    assert_eq!(GgufWriter::from_file(&f).to_bytes().unwrap(), bytes);
    f
}

#[test]
fn every_value_type_and_tensor_round_trips_with_default_alignment() {
    let f = check(build(None).to_bytes().unwrap(), 32);
    assert_eq!(f.version(), 3);
    assert_eq!(f.get_u32("v.u32").unwrap(), Some(u32::MAX));
    assert_eq!(f.get_str("v.str").unwrap(), Some("Grüße ▁ 🙂"));
    assert_eq!(f.get("v.str.raw").unwrap().as_str(), None);
    let nested = f.get_array("a.nested").unwrap().unwrap();
    assert_eq!(nested.elem_type(), GgufValueType::Array);
    assert_eq!(
        nested.as_arrays().unwrap()[0].as_i32_slice(),
        Some(&[1, 2][..])
    );
    assert_eq!(
        f.get_array("a.str").unwrap().unwrap().as_str_vec(),
        Some(vec!["<s>", "", "▁the"])
    );
}

#[test]
fn alignment_64_and_256_round_trip() {
    for a in [64u32, 256, 1] {
        let f = check(build(Some(a)).to_bytes().unwrap(), a as usize);
        assert_eq!(f.alignment(), a as usize);
        assert!(f.tensors().iter().all(|t| t.offset % u64::from(a) == 0));
    }
    // offsets under 64 are those of gguf-py: previous end rounded up to 64
    let f = GgufFile::from_bytes(build(Some(64)).to_bytes().unwrap()).unwrap();
    let offs: Vec<u64> = f.tensors().iter().map(|t| t.offset).collect();
    assert_eq!(offs, [0, 64, 192, 448, 704, 704, 768]);
}

#[test]
fn version_2_round_trips() {
    let mut w = build(None);
    w.set_version(2).unwrap();
    let bytes = w.to_bytes().unwrap();
    assert_eq!(&bytes[4..8], &2u32.to_le_bytes());
    let f = check(bytes, 32);
    assert_eq!(f.version(), 2);
    assert!(w
        .set_version(1)
        .unwrap_err()
        .to_string()
        .contains("version 1"));
}

#[test]
fn metadata_only_file_has_no_padding_like_gguf_py_vocab_files() {
    let mut w = GgufWriter::new();
    w.add_kv("k", "abc").unwrap();
    let bytes = w.to_bytes().unwrap();
    assert_eq!(bytes.len(), 24 + 8 + 1 + 4 + 8 + 3);
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.tensors().len(), 0);
    assert_eq!(GgufWriter::from_file(&f).to_bytes().unwrap(), bytes);
}

#[test]
fn file_round_trip_through_disk() {
    let dir = std::env::temp_dir().join(format!("gguf-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("rt.gguf");
    build(Some(64)).write_file(&p).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert!(f.bytes().is_mmap());
    let bytes = f.bytes().as_slice().to_vec();
    check(bytes.clone(), 64);
    assert_eq!(GgufFile::read(&p).unwrap().bytes().as_slice(), &bytes[..]);
    // the backing outlives the file and is shared, not copied
    let backing = f.bytes().clone();
    let t = f.tensor("a.f32").unwrap().clone();
    let start = f.data_offset() + t.offset as usize;
    let want = f.tensor_data(&t).to_vec();
    drop(f);
    assert_eq!(&backing.as_slice()[start..start + t.size], &want[..]);
    std::fs::remove_dir_all(&dir).unwrap();
    let e = GgufFile::open(&p).unwrap_err().to_string();
    assert!(e.contains("rt.gguf"), "{e}");
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    w.add_kv("a", 1u32).unwrap();
    let e = w.add_kv("a", 2u32).unwrap_err().to_string();
    assert!(e.contains("duplicate metadata key 'a'"), "{e}");
    w.set_kv("a", 3u32);
    assert_eq!(w.metadata(), &[("a".to_string(), GgufValue::U32(3))]);

    w.add_tensor("t", &[4], GgmlType::F32, vec![0; 16]).unwrap();
    let e = w
        .add_tensor("t", &[4], GgmlType::F32, vec![0; 16])
        .unwrap_err()
        .to_string();
    assert!(e.contains("duplicate tensor name 't'"), "{e}");
    let e = w
        .add_tensor("u", &[4], GgmlType::F32, vec![0; 15])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tensor 'u'") && e.contains("15 bytes") && e.contains("16"),
        "{e}"
    );
    let e = w
        .add_tensor("v", &[33], GgmlType::Q8_0, vec![])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tensor 'v'") && e.contains("block size 32"),
        "{e}"
    );
    let e = w
        .add_tensor("w", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor 'w'") && e.contains("n_dims 5"), "{e}");
    let e = w
        .add_tensor("x", &[-1], GgmlType::F32, vec![])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor 'x'") && e.contains("negative"), "{e}");

    w.set_kv("general.alignment", 24u32);
    let e = w.to_bytes().unwrap_err().to_string();
    assert!(e.contains("general.alignment 24"), "{e}");
    w.set_kv("general.alignment", "32");
    let e = w.to_bytes().unwrap_err().to_string();
    assert!(
        e.contains("general.alignment") && e.contains("expected u32, found string"),
        "{e}"
    );
    w.set_kv("general.alignment", 16u16); // any integer type that fits is accepted
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.alignment(), 16);
    assert_eq!(w.remove_kv("general.alignment"), Some(GgufValue::U16(16)));

    let mut deep = GgufArray::U8(vec![1]);
    for _ in 0..8 {
        deep = GgufArray::Array(vec![deep]);
    }
    w.set_kv("deep", deep);
    let e = w.to_bytes().unwrap_err().to_string();
    assert!(
        e.contains("key 'deep'") && e.contains("nested deeper"),
        "{e}"
    );
}

#[test]
fn typed_getters_are_lenient_about_integers_and_name_the_key() {
    let mut w = GgufWriter::new();
    w.add_kv("i32", 7i32).unwrap();
    w.add_kv("neg", -1i32).unwrap();
    w.add_kv("big", 1u64 << 40).unwrap();
    w.add_kv("u8", 9u8).unwrap();
    w.add_kv("s", "text").unwrap();
    w.add_kv("raw", GgufString::from_bytes(vec![0xff])).unwrap();
    w.add_kv("f64", 0.25f64).unwrap();
    w.add_kv("b", true).unwrap();
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.get_u32("i32").unwrap(), Some(7));
    assert_eq!(f.get_u32("u8").unwrap(), Some(9));
    assert_eq!(f.get_i32("neg").unwrap(), Some(-1));
    assert_eq!(f.get_u64("big").unwrap(), Some(1 << 40));
    assert_eq!(f.get_u32("missing").unwrap(), None);
    assert_eq!(f.get_f32("f64").unwrap(), Some(0.25));
    assert_eq!(f.get_bool("b").unwrap(), Some(true));
    let e = f.get_u32("neg").unwrap_err().to_string();
    assert!(
        e.contains("'neg'") && e.contains("-1") && e.contains("u32"),
        "{e}"
    );
    let e = f.get_u32("big").unwrap_err().to_string();
    assert!(e.contains("'big'") && e.contains("out of range"), "{e}");
    let e = f.get_u32("s").unwrap_err().to_string();
    assert!(
        e.contains("'s'") && e.contains("expected u32, found string"),
        "{e}"
    );
    let e = f.get_str("i32").unwrap_err().to_string();
    assert!(
        e.contains("'i32'") && e.contains("expected string, found i32"),
        "{e}"
    );
    let e = f.get_bool("u8").unwrap_err().to_string();
    assert!(e.contains("expected bool, found u8"), "{e}");
    let e = f.get_f32("s").unwrap_err().to_string();
    assert!(e.contains("expected f32, found string"), "{e}");
    let e = f.get_str("raw").unwrap_err().to_string();
    assert!(e.contains("'raw'") && e.contains("UTF-8"), "{e}");
    let e = f.get_array("s").unwrap_err().to_string();
    assert!(e.contains("expected array, found string"), "{e}");
}

fn arb_array(depth: u32) -> BoxedStrategy<GgufArray> {
    let leaf = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..8).prop_map(GgufArray::U8),
        prop::collection::vec(any::<i16>(), 0..8).prop_map(GgufArray::I16),
        prop::collection::vec(any::<u32>(), 0..8).prop_map(GgufArray::U32),
        prop::collection::vec(-1e6f32..1e6, 0..8).prop_map(GgufArray::F32),
        prop::collection::vec(any::<bool>(), 0..8).prop_map(GgufArray::Bool),
        prop::collection::vec(any::<i64>(), 0..8).prop_map(GgufArray::I64),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 0..5)
            .prop_map(|v| GgufArray::Str(v.into_iter().map(GgufString::from_bytes).collect())),
    ];
    if depth == 0 {
        leaf.boxed()
    } else {
        prop_oneof![
            3 => leaf,
            1 => prop::collection::vec(arb_array(depth - 1), 0..4).prop_map(GgufArray::Array),
        ]
        .boxed()
    }
}

fn arb_value() -> impl Strategy<Value = GgufValue> {
    prop_oneof![
        any::<u8>().prop_map(GgufValue::U8),
        any::<i8>().prop_map(GgufValue::I8),
        any::<u16>().prop_map(GgufValue::U16),
        any::<i32>().prop_map(GgufValue::I32),
        any::<u64>().prop_map(GgufValue::U64),
        (-1e30f64..1e30).prop_map(GgufValue::F64),
        any::<bool>().prop_map(GgufValue::Bool),
        ".{0,12}".prop_map(|s| GgufValue::Str(s.into())),
        arb_array(3).prop_map(GgufValue::Array),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_metadata_round_trips(values in prop::collection::vec(arb_value(), 0..12)) {
        let mut w = GgufWriter::new();
        for (i, v) in values.iter().enumerate() {
            w.add_kv(format!("k{i}"), v.clone()).unwrap();
        }
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        let got: Vec<GgufValue> = f.metadata().iter().map(|(_, v)| v.clone()).collect();
        prop_assert_eq!(&got, &values);
        prop_assert_eq!(GgufWriter::from_file(&f).to_bytes().unwrap(), bytes);
    }
}

#[test]
fn file_and_bytes_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<GgufFile>();
    assert_send_sync::<ggml_core::gguf::GgufBytes>();
    assert_send_sync::<GgufWriter>();
}
