//! The `process` operator's throughput: `cargo bench --bench process_operator` (`-- --quick`
//! for fewer records and rounds).
//!
//! A pass-through child written in Rust (this very binary, run with `--passthrough-child`)
//! echoes every bincode frame it reads (the input index dropped, as the framing says). Flint's
//! side is the real operator, fed 100-byte records (an 8-byte key, a 92-byte text value) by an
//! in-memory task I/O that counts what comes back. Paired in each round with the pipe's own
//! speed: the same child fed pre-encoded frames by one thread and drained by another, with no
//! records made or decoded. A JSON-lines round shows the other framing.

// A benchmark measures wall time with the real clock, on threads of its own.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flint::operators::{
    OperatorError, OperatorRegistry, OperatorSpec, Record, TaskContext, TaskIo, Value,
};

flint::global_allocator!();

/// A record's bytes: key plus text value.
const RECORD: usize = 100;
const KEY: usize = 8;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The child: copies each stdin frame to stdout, a bincode frame without its leading input
/// index, a JSON line as it is (the operator ignores its `input` field).
fn passthrough_child() {
    let mut stdin = BufReader::with_capacity(256 * 1024, std::io::stdin().lock());
    let mut stdout = BufWriter::with_capacity(256 * 1024, std::io::stdout().lock());
    if std::env::var("FLINT_FRAMING").as_deref() == Ok("json") {
        std::io::copy(&mut stdin, &mut stdout).expect("copying lines");
        stdout.flush().expect("stdout");
        return;
    }
    let mut body = Vec::new();
    loop {
        let mut length = [0u8; 4];
        match stdin.read_exact(&mut length) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("reading stdin: {e}"),
        }
        let length = u32::from_le_bytes(length) as usize;
        body.resize(length, 0);
        stdin.read_exact(&mut body).expect("a whole frame");
        // The input index is a varint: one byte below 251, else a marker and 2, 4 or 8 bytes.
        let skip = match body[0] {
            251 => 3,
            252 => 5,
            253 => 9,
            _ => 1,
        };
        let out = &body[skip..];
        stdout
            .write_all(&(out.len() as u32).to_le_bytes())
            .expect("stdout");
        stdout.write_all(out).expect("stdout");
    }
    stdout.flush().expect("stdout");
}

/// A task's I/O that makes `total` records and counts (and checks) what the operator emits.
struct Feed {
    template: Record,
    left: u64,
    emitted: u64,
    bytes: u64,
    artifacts: BTreeMap<String, PathBuf>,
}

impl TaskIo for Feed {
    fn subtask(&self) -> u32 {
        0
    }
    fn parallelism(&self) -> u32 {
        1
    }
    fn attempt_number(&self) -> u32 {
        0
    }
    fn next(&mut self) -> Result<Option<Record>, OperatorError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        Ok(Some(self.template.clone()))
    }
    fn emit(&mut self, record: Record) -> Result<(), OperatorError> {
        self.emitted += 1;
        self.bytes += record.key.len() as u64
            + match &record.value {
                Value::Text(text) => text.len() as u64,
                _ => 0,
            };
        Ok(())
    }
    fn is_cancelled(&self) -> bool {
        false
    }
    fn sleep(&mut self, duration: Duration) -> Result<(), OperatorError> {
        std::thread::sleep(duration);
        Ok(())
    }
    fn context(&self) -> TaskContext {
        TaskContext {
            vertex: "passthrough".into(),
            spill_dir: None,
            managed_memory: 0,
            artifacts: self.artifacts.clone(),
        }
    }
}

fn template() -> Record {
    Record {
        key: "k".repeat(KEY),
        value: Value::Text("v".repeat(RECORD - KEY)),
    }
}

/// One run of the real operator over `records`; MB/s of record bytes through the child.
fn through_operator(records: u64, framing: &str) -> f64 {
    let exe = std::env::current_exe().expect("this benchmark's path");
    let config: BTreeMap<String, String> = [
        ("command", "passthrough"),
        ("args", r#"["--passthrough-child"]"#),
        ("framing", framing),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut operator = OperatorRegistry::with_builtins()
        .create(&OperatorSpec {
            name: "process",
            config: &config,
            subtask: 0,
            parallelism: 1,
        })
        .expect("a process operator");
    let mut feed = Feed {
        template: template(),
        left: records,
        emitted: 0,
        bytes: 0,
        artifacts: [("passthrough".to_owned(), exe)].into_iter().collect(),
    };
    let began = Instant::now();
    operator.run(&mut feed).expect("the pass-through run");
    let seconds = began.elapsed().as_secs_f64();
    assert_eq!(feed.emitted, records, "every record came back");
    assert_eq!(feed.bytes, records * RECORD as u64, "and whole");
    (records * RECORD as u64) as f64 / 1e6 / seconds
}

/// The same child fed pre-encoded bincode frames straight through its pipes.
fn through_pipes(records: u64) -> f64 {
    let exe = std::env::current_exe().expect("this benchmark's path");
    let mut child = Command::new(exe)
        .arg("--passthrough-child")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // input 0, key, value Text: the frame the operator writes.
    let mut frame = Vec::new();
    let body_len = 1 + 1 + KEY + 1 + 1 + (RECORD - KEY);
    frame.extend_from_slice(&(body_len as u32).to_le_bytes());
    frame.push(0);
    frame.push(KEY as u8);
    frame.extend(std::iter::repeat_n(b'k', KEY));
    frame.push(2);
    frame.push((RECORD - KEY) as u8);
    frame.extend(std::iter::repeat_n(b'v', RECORD - KEY));
    let batch: Vec<u8> = frame.repeat(1000);
    let began = Instant::now();
    let writer = std::thread::spawn(move || {
        for _ in 0..records / 1000 {
            stdin.write_all(&batch).unwrap();
        }
    });
    let mut buffer = vec![0u8; 256 * 1024];
    let mut read = 0u64;
    loop {
        let n = stdout.read(&mut buffer).unwrap();
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    writer.join().unwrap();
    let seconds = began.elapsed().as_secs_f64();
    assert!(child.wait().unwrap().success());
    assert_eq!(read, records / 1000 * 1000 * (frame.len() as u64 - 1));
    (records / 1000 * 1000 * RECORD as u64) as f64 / 1e6 / seconds
}

fn main() {
    if std::env::args().any(|a| a == "--passthrough-child") {
        passthrough_child();
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, records) = if quick { (3, 500_000) } else { (5, 2_000_000) };
    let _ = through_operator(10_000, "bincode"); // warm-up
    let (mut operator, mut pipes, mut json) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut pair = [0.0; 2];
        for index in if round % 2 == 0 { [0, 1] } else { [1, 0] } {
            pair[index] = if index == 0 {
                through_operator(records, "bincode")
            } else {
                through_pipes(records)
            };
        }
        println!(
            "round {round}: operator {:.0} MB/s, raw pipes {:.0} MB/s",
            pair[0], pair[1]
        );
        operator.push(pair[0]);
        pipes.push(pair[1]);
        json.push(through_operator(records / 4, "json"));
    }
    let (operator, pipes, json) = (median(operator), median(pipes), median(json));
    println!(
        "pass-through process operator, {records} records of {RECORD} bytes, median of \
         {rounds}: bincode {operator:.0} MB/s ({:.2} of the raw pipes' {pipes:.0} MB/s), \
         JSON lines {json:.0} MB/s",
        operator / pipes
    );
}
