use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::operators::registry::OperatorRegistry;
use crate::operators::{TaskContext, Value};

/// A task's I/O in memory: queued (input, record) pairs, collected outputs, artifacts, and a
/// cancel flag another thread may set.
struct FakeIo {
    inputs: VecDeque<(usize, Record)>,
    outputs: Vec<Record>,
    artifacts: BTreeMap<String, PathBuf>,
    cancelled: Arc<AtomicBool>,
    /// Blocks `next` (polling the flag) once the inputs are exhausted: an upstream still going.
    hold_open: bool,
}

impl FakeIo {
    fn new(inputs: Vec<(usize, Record)>) -> Self {
        Self {
            inputs: inputs.into(),
            outputs: Vec::new(),
            artifacts: BTreeMap::new(),
            cancelled: Arc::default(),
            hold_open: false,
        }
    }
}

impl TaskIo for FakeIo {
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
        Ok(self.next_with_input()?.map(|(_, record)| record))
    }
    #[allow(clippy::disallowed_methods)] // an upstream that is still going, in real time
    fn next_with_input(&mut self) -> Result<Option<(usize, Record)>, OperatorError> {
        loop {
            if self.is_cancelled() {
                return Err(OperatorError::Cancelled);
            }
            if let Some(next) = self.inputs.pop_front() {
                return Ok(Some(next));
            }
            if !self.hold_open {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn emit(&mut self, record: Record) -> Result<(), OperatorError> {
        self.outputs.push(record);
        Ok(())
    }
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
    #[allow(clippy::disallowed_methods)] // the operator's waits, in real time
    fn sleep(&mut self, duration: Duration) -> Result<(), OperatorError> {
        if self.is_cancelled() {
            return Err(OperatorError::Cancelled);
        }
        std::thread::sleep(duration);
        Ok(())
    }
    #[allow(clippy::disallowed_methods)]
    fn sleep_ignoring_cancel(&mut self, duration: Duration) -> Result<(), OperatorError> {
        std::thread::sleep(duration);
        Ok(())
    }
    fn context(&self) -> TaskContext {
        TaskContext {
            vertex: "step".into(),
            spill_dir: None,
            managed_memory: 0,
            artifacts: self.artifacts.clone(),
        }
    }
}

fn text(key: &str, value: &str) -> Record {
    Record {
        key: key.into(),
        value: Value::Text(value.into()),
    }
}

fn operator(config: &[(&str, &str)]) -> Result<Box<dyn Operator>, OperatorError> {
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    OperatorRegistry::with_builtins().create(&OperatorSpec {
        name: PROCESS,
        config: &config,
        subtask: 0,
        parallelism: 1,
    })
}

/// `sh -c SCRIPT` on PATH.
fn shell(script: &str, framing: &str) -> Box<dyn Operator> {
    let args = serde_json::to_string(&["-c", script]).unwrap();
    operator(&[
        ("command", "sh"),
        ("allow-path", "true"),
        ("args", &args),
        ("framing", framing),
    ])
    .unwrap()
}

fn failure(result: Result<(), OperatorError>) -> String {
    match result {
        Err(OperatorError::Failed(why)) => why,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn json_lines_round_trip_through_a_child_and_keep_the_input_index() {
    // `cat` hands the frames back: each carries its input index, which Flint then ignores.
    let inputs = vec![
        (0, text("a", "left")),
        (
            1,
            Record {
                key: "b".into(),
                value: Value::Int(-7),
            },
        ),
        (
            1,
            Record {
                key: String::new(),
                value: Value::Unit,
            },
        ),
    ];
    let mut io = FakeIo::new(inputs.clone());
    shell("cat", "json").run(&mut io).unwrap();
    let expected: Vec<Record> = inputs.iter().map(|(_, r)| r.clone()).collect();
    assert_eq!(io.outputs, expected);
    // The index is on the wire: a child that keys by it sees 0 and 1.
    let mut io = FakeIo::new(inputs);
    shell(
        r#"sed 's/.*"input":\([0-9]\).*/{"key":"from-\1","value":1}/'"#,
        "json",
    )
    .run(&mut io)
    .unwrap();
    let keys: Vec<&str> = io.outputs.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["from-0", "from-1", "from-1"]);
}

#[test]
fn bincode_frames_are_length_prefixed_and_match_the_documented_layout() {
    let mut bytes = Vec::new();
    Framing::Bincode.encode(
        1,
        &Record {
            key: "ab".into(),
            value: Value::Int(-2),
        },
        &mut bytes,
    );
    // u32 LE length 6, then input 1, key length 2, "ab", variant 1 (Int), zigzag(-2) = 3.
    assert_eq!(bytes, [6, 0, 0, 0, 1, 2, b'a', b'b', 1, 3]);
    let mut bytes = Vec::new();
    Framing::Bincode.encode(0, &text("k", "hé"), &mut bytes);
    assert_eq!(bytes, [8, 0, 0, 0, 0, 1, b'k', 2, 3, b'h', 0xc3, 0xa9]);
    // What a child writes back: (key, value) only.
    let out = [5u8, 0, 0, 0, 1, b'x', 1, 0x80, 0x01];
    // 0x80 0x01 is not bincode's varint: 251+ are the only multi-byte markers, so this frame
    // decodes Int(zigzag 0x80 = 128 -> 64) and leaves a trailing byte: malformed.
    assert!(Framing::Bincode.decode(&mut &out[..]).is_err());
    let out = [4u8, 0, 0, 0, 1, b'x', 1, 84];
    let record = Framing::Bincode.decode(&mut &out[..]).unwrap().unwrap();
    assert_eq!(
        record,
        Record {
            key: "x".into(),
            value: Value::Int(42)
        }
    );
}

#[test]
fn many_records_through_a_child_that_writes_before_it_reads_do_not_deadlock() {
    // The child answers every line with a 4 KiB line: its output fills the pipes long before
    // Flint has written everything, so Flint must read while it writes.
    let count = 100_000;
    let inputs = (0..count)
        .map(|i| {
            (
                0,
                Record {
                    key: String::new(),
                    value: Value::Int(i),
                },
            )
        })
        .collect();
    let mut io = FakeIo::new(inputs);
    let script = r#"pad=$(printf '%04096d' 0); while read -r line; do echo "{\"key\":\"$pad\",\"value\":1}"; done"#;
    shell(script, "json").run(&mut io).unwrap();
    assert_eq!(io.outputs.len(), count as usize);
}

#[test]
fn artifacts_are_resolved_in_the_command_and_the_arguments() {
    let dir = std::env::temp_dir().join(format!("flint-process-artifacts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("upper.sh");
    std::fs::write(&script, "#!/bin/sh\nexec sed 's/\"abc\"/\"ABC\"/'\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o500)).unwrap();
    let data = dir.join("words.txt");
    std::fs::write(&data, "{\"key\":\"w\",\"value\":\"shipped\"}\n").unwrap();
    let mut io = FakeIo::new(vec![(0, text("k", "abc"))]);
    io.artifacts.insert("upper.sh".into(), script);
    io.artifacts.insert("words.txt".into(), data);
    operator(&[("command", "upper.sh")])
        .unwrap()
        .run(&mut io)
        .unwrap();
    assert_eq!(io.outputs, [text("k", "ABC")]);
    // `{artifact:NAME}` in an argument: a program on PATH reading a shipped file.
    let mut io = FakeIo::new(Vec::new());
    io.artifacts
        .insert("words.txt".into(), dir.join("words.txt"));
    operator(&[
        ("command", "cat"),
        ("allow-path", "true"),
        ("args", r#"["{artifact:words.txt}"]"#),
    ])
    .unwrap()
    .run(&mut io)
    .unwrap();
    assert_eq!(io.outputs, [text("w", "shipped")]);
    // A name the job does not ship.
    let mut io = FakeIo::new(Vec::new());
    let err = operator(&[
        ("command", "cat"),
        ("allow-path", "true"),
        ("args", r#"["{artifact:nope}"]"#),
    ])
    .unwrap()
    .run(&mut io)
    .unwrap_err();
    assert!(err.to_string().contains("`nope`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_configurations_are_refused_at_creation() {
    for (config, wanted) in [
        (vec![], "missing required key `command`"),
        (vec![("command", "x"), ("framing", "xml")], "`framing`"),
        (vec![("command", "x"), ("args", "not json")], "`args`"),
        (vec![("command", "/bin/sh")], "not a path"),
        (
            vec![("command", "x"), ("allow-path", "yes")],
            "`allow-path`",
        ),
    ] {
        let err = operator(&config).err().expect("refused").to_string();
        assert!(err.contains(wanted), "{config:?}: {err}");
    }
    // Neither an artifact nor allowed on PATH: refused when it runs, naming what the job ships.
    let mut io = FakeIo::new(Vec::new());
    let err = operator(&[("command", "python3")])
        .unwrap()
        .run(&mut io)
        .unwrap_err();
    assert!(matches!(err, OperatorError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("allow-path is off"), "{err}");
}

#[test]
fn what_a_child_leaves_running_holding_its_stdout_is_killed_when_it_exits() {
    let mut io = FakeIo::new(vec![(0, text("a", "b"))]);
    shell(
        r#"cat; (sleep 1000 &); echo '{"key":"done","value":null}'"#,
        "json",
    )
    .run(&mut io)
    .unwrap();
    assert_eq!(io.outputs.last().map(|r| r.key.as_str()), Some("done"));
}

#[test]
fn a_command_that_does_not_exist_fails_naming_it() {
    let mut io = FakeIo::new(vec![(0, text("a", "b"))]);
    let err = operator(&[("command", "no-such-program-flint"), ("allow-path", "true")])
        .unwrap()
        .run(&mut io)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot start `no-such-program-flint`"),
        "{err}"
    );
}

#[test]
fn a_child_that_exits_at_once_fails_with_its_code_and_its_stderr() {
    let mut io = FakeIo::new(
        (0..10_000)
            .map(|i| (0, text("k", &i.to_string())))
            .collect(),
    );
    let why = failure(shell("echo 'model file missing' >&2; exit 3", "json").run(&mut io));
    assert!(
        why.contains("`sh`") && why.contains("exited with code 3"),
        "{why}"
    );
    assert!(why.contains("model file missing"), "{why}");
}

#[test]
fn garbage_on_stdout_fails_as_a_malformed_frame() {
    let mut io = FakeIo::new(vec![(0, text("a", "b"))]);
    let why = failure(
        shell(
            "echo 'Traceback (most recent call last):'; cat >/dev/null",
            "json",
        )
        .run(&mut io),
    );
    assert!(
        why.contains("malformed frame") && why.contains("Traceback"),
        "{why}"
    );
    // JSON, but no value: a child speaking another protocol.
    let mut io = FakeIo::new(vec![(0, text("a", "b"))]);
    let why = failure(shell(r#"echo '{"KEY":"A"}'; cat >/dev/null"#, "json").run(&mut io));
    assert!(
        why.contains("malformed frame") && why.contains("no \"value\""),
        "{why}"
    );
    let mut io = FakeIo::new(vec![(0, text("a", "b"))]);
    let why = failure(
        shell(
            "printf '\\377\\377\\377\\377garbage'; cat >/dev/null",
            "bincode",
        )
        .run(&mut io),
    );
    assert!(why.contains("malformed frame"), "{why}");
}

/// Cancels `io` from another thread once `after` passed; the run must end within a deadline.
#[allow(clippy::disallowed_methods)] // a real child, in real time
fn cancelled_run(script: &str) -> (Result<(), OperatorError>, Duration) {
    let mut io = FakeIo::new(vec![(0, text("a", "b"))]);
    io.hold_open = true;
    let cancel = Arc::clone(&io.cancelled);
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        cancel.store(true, Ordering::SeqCst);
    });
    let started = std::time::Instant::now();
    let result = shell(script, "json").run(&mut io);
    let took = started.elapsed();
    canceller.join().unwrap();
    (result, took)
}

#[test]
fn cancellation_kills_a_child_that_never_reads_and_one_that_ignores_sigterm() {
    let (result, took) = cancelled_run("echo $$ > /dev/null; sleep 1000");
    assert!(
        matches!(result, Err(OperatorError::Cancelled)),
        "{result:?}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // SIGTERM ignored: SIGKILL after the grace.
    let (result, took) = cancelled_run("trap '' TERM; while true; do sleep 1; done");
    assert!(
        matches!(result, Err(OperatorError::Cancelled)),
        "{result:?}"
    );
    assert!(
        took >= KILL_GRACE && took < Duration::from_secs(30),
        "took {took:?}"
    );
}

#[test]
fn the_python_tokenizer_matches_the_built_in_one() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: python3 is not installed; the Python example is not tested here");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python/tokenize.py");
    let lines = ["The quick, brown fox", "Über x1 x1 THE", "", "a-b_c 42"];
    let inputs: Vec<(usize, Record)> = lines.iter().map(|l| (0, text("", l))).collect();
    let mut io = FakeIo::new(inputs.clone());
    let args = serde_json::to_string(&[script]).unwrap();
    for framing in ["json", "bincode"] {
        io.inputs = inputs.clone().into();
        io.outputs.clear();
        operator(&[
            ("command", "python3"),
            ("allow-path", "true"),
            ("args", &args),
            ("framing", framing),
        ])
        .unwrap()
        .run(&mut io)
        .unwrap();
        let mut expected: Vec<(String, Value)> = Vec::new();
        for line in lines {
            for word in crate::operators::builtin::words(line) {
                expected.push((word, Value::Int(1)));
            }
        }
        let got: Vec<(String, Value)> = io
            .outputs
            .iter()
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect();
        assert_eq!(got, expected, "{framing}");
    }
}
