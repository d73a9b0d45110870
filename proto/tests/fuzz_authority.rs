//! Fuzzing the HTTP/2 `:authority` fix-up wrapped around every Unix-socket connection
//! (`src/authority.rs`) with what a client could send: the corpus's client streams mutated
//! byte by byte and frame by frame, streams of random frames carrying random HPACK, and raw
//! bytes, each cut into random reads.
//!
//! Properties: no panic; every case ends; the result does not depend on how the bytes are cut
//! into reads; a refusal says it is the fix-up's and why; the output stays within a bound of
//! the input (HPACK lets a byte stand for a table entry: a small block must not become
//! megabytes); a client whose first request has a valid authority passes through byte for
//! byte; and once rewriting, every header block handed over decodes on its own with a valid
//! authority. `FUZZ_CASES=100000 cargo test -p provider-sdk --test fuzz_authority` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use provider_sdk::testing::through_authority_fix;
use tonic::codegen::http::uri::Authority;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// What one header block may become once rewritten: the fix-up's bound on a decoded list
/// (64 KiB) re-encoded as literals (a few bytes per field), split into frames.
const MAX_REWRITTEN_BLOCK: usize = 70 * 1024;

fn config(default_cases: u32) -> Config {
    Config {
        cases: std::env::var("FUZZ_CASES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default_cases),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus/authority");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).expect("a corpus file reads"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus");
    files
}

/// A frame: type, flags, stream id, payload.
type Frame<'a> = (u8, u8, [u8; 4], &'a [u8]);

/// The complete frames after the preface (an incomplete tail is ignored); `None` without the
/// preface.
fn frames(bytes: &[u8]) -> Option<Vec<Frame<'_>>> {
    bytes.strip_prefix(PREFACE).map(frames_after)
}

/// The complete frames of `rest`, the bytes after a preface.
fn frames_after(mut rest: &[u8]) -> Vec<Frame<'_>> {
    let mut out = Vec::new();
    while rest.len() >= 9 {
        let length = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        if rest.len() < 9 + length {
            break;
        }
        out.push((
            rest[3],
            rest[4],
            [rest[5], rest[6], rest[7], rest[8]],
            &rest[9..9 + length],
        ));
        rest = &rest[9 + length..];
    }
    out
}

/// The header blocks of `frames` (HEADERS, then CONTINUATIONs up to END_HEADERS), fragments
/// without padding and priority; `None` where the frames are not well formed.
fn header_blocks(frames: &[Frame<'_>]) -> Option<Vec<Vec<u8>>> {
    let mut blocks = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    for &(kind, flags, _, payload) in frames {
        match (kind, open.as_mut()) {
            (HEADERS, None) => {
                let mut start = 0;
                let mut end = payload.len();
                if flags & PADDED != 0 {
                    start = 1;
                    end = end.checked_sub(usize::from(*payload.first()?))?;
                }
                if flags & PRIORITY != 0 {
                    start += 5;
                }
                open = Some(payload.get(start..end)?.to_vec());
            }
            (CONTINUATION, Some(block)) => block.extend_from_slice(payload),
            (_, Some(_)) => return None,
            (_, None) => continue,
        }
        if flags & END_HEADERS != 0 {
            blocks.push(open.take()?);
        }
    }
    Some(blocks)
}

fn authority_is_valid(headers: &[(Vec<u8>, Vec<u8>)]) -> bool {
    headers
        .iter()
        .all(|(name, value)| name != b":authority" || Authority::try_from(value.as_slice()).is_ok())
}

/// Cuts `input` at `cuts` (positions taken modulo its length).
fn cut(input: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for point in points.into_iter().chain([input.len()]) {
        chunks.push(input[start..point].to_vec());
        start = point;
    }
    chunks
}

fn check(input: &[u8], cuts: &[usize], read_size: usize) {
    let whole = through_authority_fix(&[input.to_vec()], 8192);
    let pieces = through_authority_fix(&cut(input, cuts), read_size);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert!(a == b, "the output depends on how the input is cut"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("cut or whole disagree: {whole:?} / {pieces:?}"),
    }
    let output = match whole {
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.starts_with("HTTP/2 authority fix-up: ") && message.len() > 26,
                "a refusal that does not say why: {message:?}"
            );
            return;
        }
        Ok(output) => output,
    };
    // The fix-up hands the first 24 bytes over as the preface whatever they are (the server
    // judges them), and reads frames after them.
    let blocks_in = frames_after(input.get(PREFACE.len()..).unwrap_or_default())
        .iter()
        .filter(|(kind, ..)| *kind == HEADERS)
        .count();
    assert!(
        output.len() <= input.len() + blocks_in * MAX_REWRITTEN_BLOCK,
        "{} bytes in, {} header blocks, {} bytes out",
        input.len(),
        blocks_in,
        output.len()
    );
    let Some(input_frames) = frames(input) else {
        return;
    };
    let Some(first) = header_blocks(&input_frames).and_then(|b| b.into_iter().next()) else {
        return;
    };
    let mut decoder = loona_hpack::Decoder::new();
    decoder.set_max_allowed_table_size(4096);
    let Ok(first) = decoder.decode(&first) else {
        return;
    };
    if authority_is_valid(&first) {
        assert!(
            output == input,
            "a valid first authority was not passed through"
        );
        return;
    }
    // Rewriting: every block handed over is literals a fresh decoder reads, with valid
    // authorities.
    let output_frames = frames(&output).expect("the preface passes");
    let blocks = header_blocks(&output_frames).expect("rewritten frames are well formed");
    for block in blocks {
        let headers = loona_hpack::Decoder::new()
            .decode(&block)
            .expect("a rewritten block decodes without the client's table");
        assert!(authority_is_valid(&headers), "{headers:?}");
    }
}

#[test]
fn the_corpus_replays() {
    for (name, bytes) in corpus() {
        for read_size in [1, 7, 8192] {
            check(&bytes, &[1, 25, 33, 100, 4000], read_size);
        }
        let result = through_authority_fix(std::slice::from_ref(&bytes), 8192);
        if !name.starts_with("found-") {
            assert!(result.is_ok(), "seed {name}: {result:?}");
        }
    }
}

/// An edit of a byte stream.
#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, mask: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize },
    Truncate { at: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = any::<usize>();
    prop_oneof![
        3 => (at, 1u8..).prop_map(|(at, mask)| Edit::Flip { at, mask }),
        2 => (at, proptest::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        1 => (at, 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        1 => (at, 1usize..60).prop_map(|(at, len)| Edit::Duplicate { at, len }),
        1 => at.prop_map(|at| Edit::Truncate { at }),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    let position = |at: usize, len: usize| at % (len + 1);
    match edit {
        Edit::Flip { at, mask } => {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] ^= mask;
            }
        }
        Edit::Insert { at, bytes: new } => {
            let i = position(*at, bytes.len());
            bytes.splice(i..i, new.iter().copied());
        }
        Edit::Delete { at, len } => {
            let i = position(*at, bytes.len());
            let end = (i + len).min(bytes.len());
            bytes.drain(i..end);
        }
        Edit::Duplicate { at, len } => {
            let i = position(*at, bytes.len());
            let end = (i + len).min(bytes.len());
            let copy = bytes[i..end].to_vec();
            bytes.splice(end..end, copy);
        }
        Edit::Truncate { at } => {
            let i = position(*at, bytes.len());
            bytes.truncate(i);
        }
    }
}

/// One HPACK representation, of the kinds RFC 7541 has.
fn hpack_field() -> impl Strategy<Value = Vec<u8>> {
    const STRINGS: &[&[u8]] = &[
        b":authority",
        b":path",
        b":method",
        b"te",
        b"/run/karpenter/plugin.sock",
        b"localhost",
        b"plugin.invalid:50051",
        b"",
        b"a b",
        b"[::1]:80",
        b"\xff\xfe",
    ];
    let string = prop_oneof![
        proptest::sample::select(STRINGS).prop_map(<[u8]>::to_vec),
        proptest::collection::vec(any::<u8>(), 0..140),
    ];
    let literal = |prefix: u8| {
        (string.clone(), string.clone()).prop_map(move |(name, value)| {
            let mut out = vec![prefix];
            for s in [name, value] {
                loona_hpack::encoder::encode_integer_into(s.len(), 7, 0, &mut out)
                    .expect("writing to a Vec");
                out.extend_from_slice(&s);
            }
            out
        })
    };
    prop_oneof![
        3 => (0usize..80).prop_map(|index| {
            let mut out = Vec::new();
            loona_hpack::encoder::encode_integer_into(index, 7, 0x80, &mut out)
                .expect("writing to a Vec");
            out
        }),
        2 => literal(0x40),
        2 => literal(0x00),
        1 => literal(0x10),
        1 => prop_oneof![0usize..5000, Just(usize::MAX >> 8)].prop_map(|size| {
            let mut out = Vec::new();
            loona_hpack::encoder::encode_integer_into(size, 5, 0x20, &mut out)
                .expect("writing to a Vec");
            out
        }),
        1 => proptest::collection::vec(any::<u8>(), 1..8),
    ]
}

/// A frame with an HPACK payload, random flags and type, or a random payload.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        4 => Just(HEADERS),
        2 => Just(CONTINUATION),
        1 => Just(0u8),
        1 => Just(4u8),
        1 => any::<u8>(),
    ];
    let flags = prop_oneof![
        3 => Just(END_HEADERS),
        1 => Just(END_HEADERS | 1),
        1 => Just(0u8),
        1 => any::<u8>(),
    ];
    let payload = prop_oneof![
        4 => proptest::collection::vec(hpack_field(), 0..8).prop_map(|f| f.concat()),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ];
    (kind, flags, 0u8..8, payload, any::<bool>()).prop_map(
        |(kind, flags, stream, payload, honest_length)| {
            let length = if honest_length {
                payload.len()
            } else {
                payload.len() ^ 0x3
            };
            let mut out = vec![
                (length >> 16) as u8,
                (length >> 8) as u8,
                length as u8,
                kind,
                flags,
            ];
            out.extend_from_slice(&[0, 0, 0, stream]);
            out.extend_from_slice(&payload);
            out
        },
    )
}

fn cuts() -> impl Strategy<Value = (Vec<usize>, usize)> {
    (
        proptest::collection::vec(any::<usize>(), 0..6),
        prop_oneof![1usize..16, 16usize..20_000],
    )
}

#[test]
fn fuzz_mutated_corpus() {
    let seeds: Vec<Vec<u8>> = corpus().into_iter().map(|(_, bytes)| bytes).collect();
    let count = seeds.len();
    let input = (0..count, proptest::collection::vec(edit(), 1..5)).prop_map(move |(i, edits)| {
        let mut bytes = seeds[i].clone();
        for edit in &edits {
            apply(&mut bytes, edit);
        }
        bytes
    });
    let mut runner = TestRunner::new(config(1000));
    runner
        .run(&(input, cuts()), |(input, (cuts, read_size))| {
            check(&input, &cuts, read_size);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_random_frames() {
    let input =
        (any::<bool>(), proptest::collection::vec(frame(), 0..8)).prop_map(|(preface, frames)| {
            let mut bytes = if preface {
                PREFACE.to_vec()
            } else {
                Vec::new()
            };
            bytes.extend(frames.concat());
            bytes
        });
    let mut runner = TestRunner::new(config(1000));
    runner
        .run(&(input, cuts()), |(input, (cuts, read_size))| {
            check(&input, &cuts, read_size);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_raw_bytes() {
    let input = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|tail| [PREFACE, &tail].concat()),
    ];
    let mut runner = TestRunner::new(config(500));
    runner
        .run(&(input, cuts()), |(input, (cuts, read_size))| {
            check(&input, &cuts, read_size);
            Ok(())
        })
        .unwrap();
}
