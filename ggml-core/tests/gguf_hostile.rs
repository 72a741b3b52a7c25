//! Hostile input: every malformed file is rejected with an error that names
//! the problem, and no input panics or allocates from an unchecked count.

use std::time::{Duration, Instant};

use ggml_core::gguf::{GgufArray, GgufFile, GgufString, GgufValue, GgufWriter};
use ggml_core::GgmlType;

// ---- hand-built files -------------------------------------------------------

const U8: u32 = 0;
const U32: u32 = 4;
const BOOL: u32 = 7;
const STR: u32 = 8;
const ARR: u32 = 9;
const F32: u32 = 0; // ggml type id
const Q4_0: u32 = 2;

fn hdr_v(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn hdr(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    hdr_v(3, n_tensors, n_kv)
}

fn s(b: &mut Vec<u8>, x: &[u8]) {
    b.extend_from_slice(&(x.len() as u64).to_le_bytes());
    b.extend_from_slice(x);
}

fn u32le(x: u32) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

fn u64le(x: u64) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

/// One metadata entry: key, type id, payload.
fn kv(key: &[u8], ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    s(&mut b, key);
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

fn str_payload(x: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    s(&mut b, x);
    b
}

fn arr_payload(elem_ty: u32, count: u64, elems: &[u8]) -> Vec<u8> {
    let mut b = u32le(elem_ty);
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(elems);
    b
}

/// One tensor info.
fn ti(name: &[u8], ne: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = Vec::new();
    s(&mut b, name);
    b.extend_from_slice(&(ne.len() as u32).to_le_bytes());
    for &n in ne {
        b.extend_from_slice(&n.to_le_bytes());
    }
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

/// Header + kvs + tensor infos, padded to 32, then `data_len` zero bytes.
fn file(kvs: &[Vec<u8>], tis: &[Vec<u8>], data_len: usize) -> Vec<u8> {
    let mut b = hdr(tis.len() as u64, kvs.len() as u64);
    for k in kvs {
        b.extend_from_slice(k);
    }
    for t in tis {
        b.extend_from_slice(t);
    }
    if !tis.is_empty() {
        b.resize(b.len().div_ceil(32) * 32, 0);
    }
    b.resize(b.len() + data_len, 0);
    b
}

fn nested_array(depth: usize) -> Vec<u8> {
    // depth 1 = array of u8 with one element
    if depth == 1 {
        return arr_payload(U8, 1, &[7]);
    }
    arr_payload(ARR, 1, &nested_array(depth - 1))
}

fn err_of(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => panic!("parsed OK: {f:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_bad_input_is_rejected_with_a_message_naming_the_problem() {
    let name_t = b"blk.0.w".as_slice();
    let huge = 1u64 << 60;
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("empty file", vec![], &["magic"]),
        ("short magic", b"GG".to_vec(), &["magic"]),
        (
            "wrong magic",
            {
                let mut b = hdr(0, 0);
                b[..4].copy_from_slice(b"GGML");
                b
            },
            &["magic"],
        ),
        ("version 1", hdr_v(1, 0, 0), &["unsupported GGUF version 1"]),
        ("version 0", hdr_v(0, 0, 0), &["unknown GGUF version 0"]),
        ("version 4", hdr_v(4, 0, 0), &["unknown GGUF version 4"]),
        (
            "big-endian v3",
            hdr_v(0x0300_0000, 0, 0),
            &["unknown GGUF version", "big-endian"],
        ),
        (
            "header cut in version",
            b"GGUF\x03\0".to_vec(),
            &["version", "end of file"],
        ),
        (
            "header cut in counts",
            hdr(0, 0)[..20].to_vec(),
            &["metadata kv count", "end of file"],
        ),
        (
            "2^60 kvs",
            hdr(0, huge),
            &["metadata kv count", "out of range"],
        ),
        (
            "2^60 tensors",
            hdr(huge, 0),
            &["tensor count", "out of range"],
        ),
        (
            "kv count beyond file",
            {
                let mut b = hdr(0, 3);
                b.extend(kv(b"a", U8, &[1]));
                b
            },
            &["metadata kv count 3", "out of range"],
        ),
        (
            "tensor count beyond file",
            {
                let mut b = hdr(2, 0);
                b.extend(ti(b"x", &[4], F32, 0));
                b
            },
            &["tensor count 2", "out of range"],
        ),
        (
            "2^60-byte key",
            {
                let mut b = hdr(0, 1);
                b.extend(u64le(huge));
                b.extend(u32le(U8));
                b.push(0);
                b
            },
            &["key of metadata entry 0", "end of file"],
        ),
        (
            "key past EOF",
            {
                let mut b = hdr(0, 1);
                b.extend(u64le(20));
                b.extend(b"abcdefgh");
                b
            },
            &["key of metadata entry 0", "string of 20 bytes"],
        ),
        (
            "2^60-byte string value",
            file(&[kv(b"s", STR, &u64le(huge))], &[], 0),
            &["key 's'", "end of file"],
        ),
        (
            "string value past EOF",
            file(&[kv(b"s", STR, &[9, 0, 0, 0, 0, 0, 0, 0, b'x'])], &[], 0),
            &["key 's'", "string of 9 bytes"],
        ),
        (
            "scalar value past EOF",
            {
                let mut b = hdr(0, 1);
                b.extend(kv(b"n", U32, &[1, 2]));
                b
            },
            &["key 'n'", "end of file"],
        ),
        (
            "unknown value type",
            file(&[kv(b"k", 13, &[0; 8])], &[], 0),
            &["key 'k'", "unknown value type id 13"],
        ),
        (
            "unknown array element type",
            file(&[kv(b"k", ARR, &arr_payload(99, 0, &[]))], &[], 0),
            &["key 'k'", "unknown value type id 99"],
        ),
        (
            "arrays nested too deep",
            file(&[kv(b"deep", ARR, &nested_array(9))], &[], 0),
            &["key 'deep'", "nested deeper than 8"],
        ),
        (
            "array of u32 past EOF",
            file(&[kv(b"arr", ARR, &arr_payload(U32, 1000, &[0; 8]))], &[], 0),
            &["array of key 'arr'", "count 1000", "out of range"],
        ),
        (
            "array of 2^60 strings",
            file(&[kv(b"toks", ARR, &arr_payload(STR, huge, &[]))], &[], 0),
            &["array of key 'toks'", "out of range"],
        ),
        (
            "array of 2^60 u8",
            file(&[kv(b"b", ARR, &arr_payload(U8, huge, &[]))], &[], 0),
            &["array of key 'b'", "out of range"],
        ),
        (
            "array of 2^60 arrays",
            file(&[kv(b"aa", ARR, &arr_payload(ARR, huge, &[]))], &[], 0),
            &["array of key 'aa'", "out of range"],
        ),
        (
            "array string element past EOF",
            file(
                &[kv(b"toks", ARR, &arr_payload(STR, 1, &u64le(100)))],
                &[],
                0,
            ),
            &["element 0 of array of key 'toks'"],
        ),
        (
            "bool value 2",
            file(&[kv(b"flag", BOOL, &[2])], &[], 0),
            &["key 'flag'", "invalid bool value 2"],
        ),
        (
            "bool array element 7",
            file(&[kv(b"flags", ARR, &arr_payload(BOOL, 2, &[1, 7]))], &[], 0),
            &["key 'flags'", "invalid bool value 7"],
        ),
        (
            "non-UTF-8 key",
            file(&[kv(b"k\xff", U8, &[1])], &[], 0),
            &["key of metadata entry 0", "UTF-8"],
        ),
        (
            "duplicate key",
            file(&[kv(b"a.b", U8, &[1]), kv(b"a.b", U8, &[2])], &[], 0),
            &["duplicate metadata key 'a.b'"],
        ),
        (
            "alignment 0",
            file(&[kv(b"general.alignment", U32, &u32le(0))], &[], 0),
            &["general.alignment 0"],
        ),
        (
            "alignment 48",
            file(&[kv(b"general.alignment", U32, &u32le(48))], &[], 0),
            &["general.alignment 48", "power of two"],
        ),
        (
            "alignment is a string",
            file(
                &[kv(b"general.alignment", STR, &str_payload(b"32"))],
                &[],
                0,
            ),
            &["general.alignment", "expected u32, found string"],
        ),
        (
            "n_dims 5",
            file(&[], &[ti(name_t, &[1, 1, 1, 1, 1], F32, 0)], 32),
            &["tensor 'blk.0.w'", "n_dims 5"],
        ),
        (
            "negative ne",
            file(&[], &[ti(name_t, &[4, (-2i64) as u64], F32, 0)], 32),
            &["tensor 'blk.0.w'", "ne[1] = -2", "negative"],
        ),
        (
            "element count overflow",
            file(&[], &[ti(name_t, &[1 << 32, 1 << 32, 1 << 32], F32, 0)], 32),
            &["tensor 'blk.0.w'", "overflows"],
        ),
        (
            "byte size overflow",
            file(&[], &[ti(name_t, &[1 << 62], F32, 0)], 32),
            &["tensor 'blk.0.w'", "overflows"],
        ),
        (
            "ne0 not a multiple of the block size",
            file(&[], &[ti(name_t, &[33, 2], Q4_0, 0)], 64),
            &["tensor 'blk.0.w'", "ne[0] = 33", "block size 32"],
        ),
        (
            "unknown tensor type",
            file(&[], &[ti(name_t, &[4], 4, 0)], 32),
            &["tensor 'blk.0.w'", "unknown tensor type id 4"],
        ),
        (
            "huge tensor type",
            file(&[], &[ti(name_t, &[4], u32::MAX, 0)], 32),
            &["tensor 'blk.0.w'", "unknown tensor type id 4294967295"],
        ),
        (
            "non-UTF-8 tensor name",
            file(&[], &[ti(b"w\xc3", &[4], F32, 0)], 32),
            &["name of tensor 0", "UTF-8"],
        ),
        (
            "tensor name past EOF",
            {
                let mut b = hdr(1, 0);
                b.extend(u64le(40));
                b.extend([b'x'; 20]);
                b
            },
            &["name of tensor 0", "end of file"],
        ),
        (
            "tensor info cut in ne",
            {
                let mut b = hdr(1, 0);
                b.extend(ti(name_t, &[4, 4], F32, 0));
                b.truncate(b.len() - 20);
                b
            },
            &["ne[1] of tensor 'blk.0.w'", "end of file"],
        ),
        (
            "duplicate tensor name",
            file(
                &[],
                &[ti(name_t, &[8], F32, 0), ti(name_t, &[8], F32, 32)],
                64,
            ),
            &["duplicate tensor name 'blk.0.w'"],
        ),
        (
            "misaligned tensor offset",
            file(&[], &[ti(name_t, &[4], F32, 16)], 64),
            &["tensor 'blk.0.w'", "offset 16", "alignment 32"],
        ),
        (
            "misaligned under general.alignment 64",
            file(
                &[kv(b"general.alignment", U32, &u32le(64))],
                &[ti(name_t, &[4], F32, 32)],
                128,
            ),
            &["tensor 'blk.0.w'", "offset 32", "alignment 64"],
        ),
        (
            "tensor data past EOF",
            file(&[], &[ti(name_t, &[64], F32, 0)], 100),
            &["tensor 'blk.0.w'", "out of bounds", "size 256"],
        ),
        (
            "tensor offset 2^63",
            file(&[], &[ti(name_t, &[4], F32, 1 << 63)], 32),
            &["tensor 'blk.0.w'", "out of bounds"],
        ),
        (
            "tensor offset u64::MAX-31",
            file(&[], &[ti(name_t, &[4], F32, u64::MAX - 31)], 32),
            &["tensor 'blk.0.w'", "out of bounds"],
        ),
        (
            "overlapping tensors",
            file(&[], &[ti(b"a", &[16], F32, 0), ti(b"b", &[8], F32, 32)], 64),
            &["tensor 'b'", "overlaps tensor 'a'"],
        ),
    ];
    assert!(cases.len() >= 45);
    for (label, bytes, needles) in cases {
        let t0 = Instant::now();
        let msg = err_of(bytes);
        eprintln!("{label}: {msg}");
        assert!(t0.elapsed() < Duration::from_secs(1), "{label}: slow");
        for n in needles {
            assert!(msg.contains(n), "{label}: message {msg:?} lacks {n:?}");
        }
    }
}

#[test]
fn counts_of_2_pow_60_fail_fast_without_allocating() {
    let huge = 1u64 << 60;
    let cases = [
        hdr(huge, 0),
        hdr(0, huge),
        hdr(huge, huge),
        hdr(u64::MAX, u64::MAX),
        file(&[kv(b"s", STR, &u64le(huge))], &[], 0),
        file(&[kv(b"t", ARR, &arr_payload(STR, huge, &[]))], &[], 0),
        file(&[kv(b"t", ARR, &arr_payload(ARR, u64::MAX, &[]))], &[], 0),
        file(&[kv(b"t", ARR, &arr_payload(12, huge, &[]))], &[], 0),
    ];
    for (i, c) in cases.into_iter().enumerate() {
        let t0 = Instant::now();
        assert!(GgufFile::from_bytes(c).is_err(), "case {i}");
        assert!(t0.elapsed() < Duration::from_millis(500), "case {i} slow");
    }
}

// ---- truncation and mutation of a valid file --------------------------------

/// A small valid file: every value type, nested arrays, three tensors. The
/// last tensor's size is a multiple of the alignment, so no trailing padding
/// exists and every proper prefix must be rejected.
fn small_valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "test").unwrap();
    w.add_kv("v.u8", 200u8).unwrap();
    w.add_kv("v.i8", -5i8).unwrap();
    w.add_kv("v.u16", 60000u16).unwrap();
    w.add_kv("v.i16", -30000i16).unwrap();
    w.add_kv("v.u32", 4_000_000_000u32).unwrap();
    w.add_kv("v.i32", -2_000_000_000i32).unwrap();
    w.add_kv("v.f32", 1.5f32).unwrap();
    w.add_kv("v.bool", true).unwrap();
    w.add_kv("v.str", "héllo").unwrap();
    w.add_kv("v.u64", u64::MAX).unwrap();
    w.add_kv("v.i64", i64::MIN).unwrap();
    w.add_kv("v.f64", -2.25f64).unwrap();
    w.add_kv("a.str", vec!["a", "bc", ""]).unwrap();
    w.add_kv("a.f32", vec![0.5f32, -1.0]).unwrap();
    w.add_kv("a.bool", vec![true, false]).unwrap();
    w.add_kv(
        "a.nested",
        vec![
            GgufArray::I32(vec![1, -2]),
            GgufArray::Array(vec![GgufArray::Str(vec![GgufString::from("x")])]),
            GgufArray::U8(vec![]),
        ],
    )
    .unwrap();
    w.add_tensor("t.f32", &[3, 2], GgmlType::F32, vec![1u8; 24])
        .unwrap();
    w.add_tensor("t.q4_0", &[32], GgmlType::Q4_0, vec![2u8; 18])
        .unwrap();
    w.add_tensor("t.f16", &[16], GgmlType::F16, vec![3u8; 32])
        .unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    let full = small_valid_file();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.metadata().len(), 17);
    for len in 0..full.len() {
        let r = GgufFile::from_bytes(full[..len].to_vec());
        assert!(r.is_err(), "prefix of {len}/{} bytes parsed", full.len());
    }
}

/// xorshift64*: a deterministic stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Use everything a parsed file offers, and write it back.
fn exercise(f: &GgufFile) {
    for (k, v) in f.metadata() {
        let _ = f.get_u32(k);
        let _ = f.get_f32(k);
        let _ = f.get_bool(k);
        let _ = f.get_str(k);
        if let GgufValue::Array(a) = v {
            let _ = a.as_str_vec();
            let _ = a.as_i32_vec();
        }
    }
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).len(), t.size);
    }
    let back = GgufWriter::from_file(f).to_bytes().unwrap();
    let g = GgufFile::from_bytes(back).unwrap();
    assert_eq!(g.tensors(), f.tensors());
}

#[test]
fn random_single_byte_mutations_never_panic() {
    let full = small_valid_file();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..5000 {
        let mut b = full.clone();
        let i = (rng.next() % b.len() as u64) as usize;
        let mut v = rng.next() as u8;
        if v == b[i] {
            v ^= 0x80;
        }
        b[i] = v;
        match GgufFile::from_bytes(b) {
            Ok(f) => {
                exercise(&f);
                ok += 1;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                err += 1;
            }
        }
    }
    // Both outcomes occur: data bytes are free, header bytes are not.
    assert!(ok > 0 && err > 0, "ok {ok} err {err}");
}

#[test]
fn random_mutations_of_a_real_model_header_never_panic() {
    let path = fixtures::or_skip!(fixtures::fixture_path("models/tiny-qwen3moe-q4_0.gguf"));
    let full = std::fs::read(path).unwrap();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let header_len = f.data_offset();
    let mut rng = Rng(42);
    for _ in 0..300 {
        let mut b = full[..].to_vec();
        for _ in 0..1 + rng.next() % 3 {
            let i = (rng.next() % header_len as u64) as usize;
            b[i] = rng.next() as u8;
        }
        if let Ok(f) = GgufFile::from_bytes(b) {
            exercise(&f);
        }
    }
}
