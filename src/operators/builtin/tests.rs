use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;

/// A task's I/O in memory: queued inputs, collected outputs, a cancel flag.
struct TestIo {
    subtask: u32,
    parallelism: u32,
    attempt: u32,
    inputs: VecDeque<Record>,
    /// `next` fails with `InputUnavailable` once this many records have been read.
    fail_after: Option<usize>,
    read: usize,
    outputs: Vec<Record>,
    cancelled: Arc<AtomicBool>,
    slept: Duration,
}

impl TestIo {
    fn new(inputs: Vec<Record>) -> Self {
        Self {
            subtask: 0,
            parallelism: 1,
            attempt: 0,
            inputs: inputs.into(),
            fail_after: None,
            read: 0,
            outputs: Vec::new(),
            cancelled: Arc::new(AtomicBool::new(false)),
            slept: Duration::ZERO,
        }
    }

    fn subtask(mut self, subtask: u32, parallelism: u32) -> Self {
        self.subtask = subtask;
        self.parallelism = parallelism;
        self
    }

    fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }
}

impl TaskIo for TestIo {
    fn subtask(&self) -> u32 {
        self.subtask
    }

    fn parallelism(&self) -> u32 {
        self.parallelism
    }

    fn attempt_number(&self) -> u32 {
        self.attempt
    }

    fn next(&mut self) -> Result<Option<Record>, OperatorError> {
        if self.is_cancelled() {
            return Err(OperatorError::Cancelled);
        }
        if self.fail_after == Some(self.read) {
            return Err(OperatorError::InputUnavailable("producer gone".into()));
        }
        self.read += 1;
        Ok(self.inputs.pop_front())
    }

    fn emit(&mut self, record: Record) -> Result<(), OperatorError> {
        self.outputs.push(record);
        Ok(())
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    #[allow(clippy::disallowed_methods)] // the canceller test needs real time to pass
    fn sleep(&mut self, duration: Duration) -> Result<(), OperatorError> {
        let step = Duration::from_millis(1);
        let until = self.slept + duration;
        while self.slept < until {
            if self.is_cancelled() {
                return Err(OperatorError::Cancelled);
            }
            std::thread::sleep(step);
            self.slept += step;
        }
        Ok(())
    }
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "flint-builtin-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn build(name: &str, config: &[(&str, &str)]) -> Result<Box<dyn Operator>, OperatorError> {
    let config: BTreeMap<String, String> = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    OperatorRegistry::with_builtins().create(&OperatorSpec {
        name,
        config: &config,
        subtask: 0,
        parallelism: 1,
    })
}

fn text(s: &str) -> Record {
    Record {
        key: String::new(),
        value: Value::Text(s.to_owned()),
    }
}

fn int(key: &str, n: i64) -> Record {
    Record {
        key: key.to_owned(),
        value: Value::Int(n),
    }
}

fn texts(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| match &r.value {
            Value::Text(t) => t.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect()
}

fn assert_config_error(result: Result<Box<dyn Operator>, OperatorError>, op: &str, key: &str) {
    match result.err() {
        Some(OperatorError::Config { operator, message }) => {
            assert_eq!(operator, op);
            assert!(message.contains(&format!("`{key}`")), "{message}");
        }
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// Runs `text-source` on `path` as every subtask of `parallelism`, in subtask order.
fn read_all_splits(path: &Path, parallelism: u32) -> Vec<Vec<String>> {
    let path = path.to_str().unwrap();
    (0..parallelism)
        .map(|i| {
            let mut op = build(TEXT_SOURCE, &[("path", path)]).unwrap();
            let mut io = TestIo::new(vec![]).subtask(i, parallelism);
            op.run(&mut io).unwrap();
            assert!(io.outputs.iter().all(|r| r.key.is_empty()));
            texts(&io.outputs)
        })
        .collect()
}

/// A deterministic pseudo-random generator: no `rand` in tests that need no distribution.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

fn random_text(seed: u64) -> String {
    const PIECES: [&str; 12] = [
        "a",
        "word",
        "é",
        "日本語",
        " ",
        "\r",
        "x y",
        "Straße",
        "🦀",
        "\t",
        "ÉCOLE",
        "don't",
    ];
    let mut rng = Lcg(seed);
    let mut out = String::new();
    let lines = rng.below(40);
    for line in 0..lines {
        for _ in 0..rng.below(8) {
            out.push_str(PIECES[rng.below(PIECES.len() as u64) as usize]);
        }
        let last = line + 1 == lines;
        if !last || rng.below(2) == 0 {
            out.push_str(if rng.below(3) == 0 { "\r\n" } else { "\n" });
        }
    }
    out
}

#[test]
fn text_source_splits_cover_every_line_exactly_once() {
    let dir = TempDir::new("splits");
    let long = "λ".repeat(50_000);
    let mut cases: Vec<String> = vec![
        String::new(),
        "\n".into(),
        "\n\n\n".into(),
        "one line without a newline".into(),
        "a\r\nb\r\n".into(),
        "a\n\nb\n\n".into(),
        "ends with a bare cr\r".into(),
        "é\nü\n日本\n🦀".into(),
        long.clone(),
        format!("x\n{long}\ny"),
        format!("{long}\n"),
    ];
    cases.extend((0..24).map(random_text));
    for (n, case) in cases.iter().enumerate() {
        let path = dir.0.join(format!("case-{n}.txt"));
        fs::write(&path, case).unwrap();
        let expected: Vec<&str> = case.lines().collect();
        for parallelism in 1..=8 {
            let splits = read_all_splits(&path, parallelism);
            let got: Vec<String> = splits.concat();
            assert_eq!(
                got, expected,
                "case {n} ({case:?}) with parallelism {parallelism}: {splits:?}"
            );
        }
    }
}

#[test]
fn text_source_assigns_a_line_to_the_split_holding_its_first_byte() {
    let dir = TempDir::new("owner");
    let path = dir.0.join("in.txt");
    // 12 bytes; with P = 2 the splits are [0, 6) and [6, 12). "bb" starts at byte 6.
    fs::write(&path, "aaaaa\nbb\ncc\n").unwrap();
    assert_eq!(
        read_all_splits(&path, 2),
        vec![
            vec!["aaaaa".to_owned()],
            vec!["bb".to_owned(), "cc".to_owned()]
        ]
    );
    // With P = 3 the splits are [0, 4), [4, 8), [8, 12): "aaaaa" runs past 4, "bb" starts at 6,
    // and "cc" starts at 9.
    assert_eq!(
        read_all_splits(&path, 3),
        vec![
            vec!["aaaaa".to_owned()],
            vec!["bb".to_owned()],
            vec!["cc".to_owned()]
        ]
    );
}

#[test]
fn text_source_decodes_invalid_utf8_lossily() {
    let dir = TempDir::new("lossy");
    let path = dir.0.join("in.txt");
    fs::write(&path, b"ok\n\xff\xfe bad\r\nend").unwrap();
    for parallelism in 1..=4 {
        assert_eq!(
            read_all_splits(&path, parallelism).concat(),
            vec!["ok", "\u{FFFD}\u{FFFD} bad", "end"]
        );
    }
}

/// A directory fails alike on every attempt: a configuration error (the job fails at once),
/// not an I/O error that restarts it (it did, three times, with "Is a directory").
#[test]
fn text_source_on_a_directory_is_a_configuration_error() {
    let dir = TempDir::new("a-directory");
    let mut op = build(TEXT_SOURCE, &[("path", dir.0.to_str().unwrap())]).unwrap();
    match op.run(&mut TestIo::new(vec![])) {
        Err(OperatorError::Config { operator, message }) => {
            assert_eq!(operator, TEXT_SOURCE);
            assert!(
                message.contains("a-directory")
                    && message.contains("` is a directory; text-source reads one file"),
                "{message}"
            );
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn text_source_missing_file_names_the_path() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("nope.txt");
    let mut op = build(TEXT_SOURCE, &[("path", path.to_str().unwrap())]).unwrap();
    match op.run(&mut TestIo::new(vec![])) {
        Err(err @ OperatorError::Io { .. }) => {
            assert!(err.to_string().contains("nope.txt"), "{err}");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert_config_error(build(TEXT_SOURCE, &[]), TEXT_SOURCE, "path");
}

#[test]
fn text_source_stops_when_cancelled() {
    let dir = TempDir::new("cancel");
    let path = dir.0.join("in.txt");
    fs::write(&path, "line\n".repeat(20_000)).unwrap();
    let mut op = build(TEXT_SOURCE, &[("path", path.to_str().unwrap())]).unwrap();
    let mut io = TestIo::new(vec![]);
    io.cancelled.store(true, Ordering::SeqCst);
    assert!(matches!(op.run(&mut io), Err(OperatorError::Cancelled)));
    assert!(io.outputs.len() <= CANCEL_CHECK_INTERVAL as usize);
}

#[test]
fn tokenize_splits_unicode_words_and_lowercases() {
    let mut op = build(TOKENIZE, &[]).unwrap();
    let mut io = TestIo::new(vec![
        text("Straße ÉCOLE 42 don't stop—now, x1y2!"),
        text(""),
        text("  ...  "),
        text("日本語 Ünïcödé"),
    ]);
    op.run(&mut io).unwrap();
    let words: Vec<&str> = io.outputs.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        words,
        vec![
            "straße",
            "école",
            "42",
            "don",
            "t",
            "stop",
            "now",
            "x1y2",
            "日本語",
            "ünïcödé"
        ]
    );
    assert!(io.outputs.iter().all(|r| r.value == Value::Int(1)));

    let mut io = TestIo::new(vec![int("k", 1)]);
    assert!(matches!(op.run(&mut io), Err(OperatorError::Failed(_))));
}

#[test]
fn count_by_key_sums_per_key_in_key_order() {
    let mut op = build(COUNT_BY_KEY, &[]).unwrap();
    let mut io = TestIo::new(vec![
        int("b", 1),
        int("a", 2),
        int("b", 3),
        int("c", -1),
        int("a", 0),
    ]);
    op.run(&mut io).unwrap();
    assert_eq!(io.outputs, vec![int("a", 2), int("b", 4), int("c", -1)]);

    let mut io = TestIo::new(vec![text("not a number")]);
    assert!(matches!(op.run(&mut io), Err(OperatorError::Failed(_))));
    let mut io = TestIo::new(vec![int("a", i64::MAX), int("a", 1)]);
    assert!(matches!(op.run(&mut io), Err(OperatorError::Failed(_))));
}

#[test]
fn file_sink_writes_key_tab_value_lines_under_the_final_name() {
    let dir = TempDir::new("sink");
    let out = dir.0.join("nested/out");
    let mut op = build(FILE_SINK, &[("path", out.to_str().unwrap())]).unwrap();
    let mut io = TestIo::new(vec![
        int("a", 3),
        Record {
            key: "b".into(),
            value: Value::Text("x y".into()),
        },
        Record {
            key: "c".into(),
            value: Value::Unit,
        },
        int("d", -7),
    ])
    .subtask(3, 4);
    op.run(&mut io).unwrap();
    assert_eq!(
        fs::read_to_string(out.join("part-00003")).unwrap(),
        "a\t3\nb\tx y\nc\t\nd\t-7\n"
    );
    let names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["part-00003"], "no temporary file is left");
}

#[test]
fn file_sink_never_writes_through_a_link_planted_at_its_temporary_name() {
    // Issue 34's `authorized_keys` attack: someone who can write the output directory plants
    // a link where the sink's temporary file will be, pointing at a file of the Flint user.
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("sink-link");
    let victim = dir.0.join("authorized_keys");
    fs::write(&victim, "ssh-ed25519 AAAA the-owner\n").unwrap();
    let out = dir.0.join("out");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join(".part-00000.attempt-0.inprogress")).unwrap();
    let mut op = build(FILE_SINK, &[("path", out.to_str().unwrap())]).unwrap();
    op.run(&mut TestIo::new(vec![int("attacker-key", 1)]))
        .unwrap();
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        "ssh-ed25519 AAAA the-owner\n",
        "the link's target is untouched"
    );
    let part = out.join("part-00000");
    assert_eq!(fs::read_to_string(&part).unwrap(), "attacker-key\t1\n");
    assert!(
        !fs::symlink_metadata(&part)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::metadata(&part).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn file_sink_failed_attempt_leaves_no_file() {
    let dir = TempDir::new("sink-fail");
    let mut op = build(FILE_SINK, &[("path", dir.0.to_str().unwrap())]).unwrap();
    let mut io = TestIo::new(vec![int("a", 1), int("b", 2)]);
    io.fail_after = Some(1);
    assert!(matches!(
        op.run(&mut io),
        Err(OperatorError::InputUnavailable(_))
    ));
    assert_eq!(fs::read_dir(&dir.0).unwrap().count(), 0, "nothing left");

    // A retry then succeeds, replacing nothing half-written.
    let mut io = TestIo::new(vec![int("a", 1)]).attempt(1);
    op.run(&mut io).unwrap();
    assert_eq!(
        fs::read_to_string(dir.0.join("part-00000")).unwrap(),
        "a\t1\n"
    );
}

#[test]
fn file_sink_unwritable_directory_names_it() {
    let dir = TempDir::new("sink-unwritable");
    // A regular file where the directory should be: unwritable even for root.
    let blocker = dir.0.join("blocker");
    fs::write(&blocker, "").unwrap();
    let target = blocker.join("out");
    let mut op = build(FILE_SINK, &[("path", target.to_str().unwrap())]).unwrap();
    match op.run(&mut TestIo::new(vec![int("a", 1)])) {
        Err(err @ OperatorError::Io { .. }) => {
            assert!(err.to_string().contains("blocker/out"), "{err}");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert_config_error(build(FILE_SINK, &[]), FILE_SINK, "path");
    assert_config_error(build(FILE_SINK, &[("path", "")]), FILE_SINK, "path");
}

#[test]
fn noop_generates_as_a_source_and_passes_input_through() {
    let mut op = build(NOOP, &[("count", "3")]).unwrap();
    let mut io = TestIo::new(vec![]);
    op.run(&mut io).unwrap();
    assert_eq!(io.outputs, vec![int("0", 0), int("1", 1), int("2", 2)]);

    let mut op = build(NOOP, &[]).unwrap();
    let inputs = vec![int("x", 5), text("y")];
    let mut io = TestIo::new(inputs.clone());
    op.run(&mut io).unwrap();
    assert_eq!(io.outputs, inputs);

    assert_config_error(build(NOOP, &[("count", "-1")]), NOOP, "count");
    assert_config_error(build(NOOP, &[("count", "lots")]), NOOP, "count");

    let mut op = build(NOOP, &[("count", "1000000000")]).unwrap();
    let mut io = TestIo::new(vec![]);
    io.cancelled.store(true, Ordering::SeqCst);
    assert!(matches!(op.run(&mut io), Err(OperatorError::Cancelled)));
    assert!(io.outputs.len() <= CANCEL_CHECK_INTERVAL as usize);
}

#[test]
fn fail_once_fails_attempt_zero_only() {
    let mut op = build(FAIL_ONCE, &[("count", "2")]).unwrap();
    let mut io = TestIo::new(vec![int("in", 9)]).subtask(2, 3);
    match op.run(&mut io) {
        Err(OperatorError::Failed(message)) => {
            assert_eq!(message, "fail-once: failing the first attempt of subtask 2")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(io.outputs.is_empty());

    let mut io = TestIo::new(vec![int("in", 9)]).subtask(2, 3).attempt(1);
    op.run(&mut io).unwrap();
    assert_eq!(io.outputs, vec![int("0", 0), int("1", 1), int("in", 9)]);
}

#[test]
fn sleep_waits_then_passes_through() {
    let mut op = build(SLEEP, &[("ms", "3")]).unwrap();
    let mut io = TestIo::new(vec![int("a", 1)]);
    op.run(&mut io).unwrap();
    assert_eq!(io.slept, Duration::from_millis(3));
    assert_eq!(io.outputs, vec![int("a", 1)]);

    assert_config_error(build(SLEEP, &[]), SLEEP, "ms");
    assert_config_error(build(SLEEP, &[("ms", "soon")]), SLEEP, "ms");
}

#[test]
#[allow(clippy::disallowed_methods)] // A test thread plays the canceller.
fn sleep_is_cut_short_by_cancellation() {
    let mut op = build(SLEEP, &[("ms", "60000")]).unwrap();
    let mut io = TestIo::new(vec![int("a", 1)]);
    let cancel = Arc::clone(&io.cancelled);
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        cancel.store(true, Ordering::SeqCst);
    });
    assert!(matches!(op.run(&mut io), Err(OperatorError::Cancelled)));
    canceller.join().unwrap();
    assert!(io.slept < Duration::from_secs(60));
    assert!(io.outputs.is_empty());
}

#[test]
#[allow(clippy::disallowed_methods)] // A test thread opens the gate.
fn sleep_holds_its_input_until_its_gate_file_exists() {
    let dir = TempDir::new("gate");
    let gate = dir.0.join("open");
    let gate_arg = gate.to_str().unwrap().to_owned();
    let mut op = build(SLEEP, &[("ms", "0"), ("until-exists", &gate_arg)]).unwrap();
    let mut io = TestIo::new(vec![int("a", 1)]);
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        fs::write(&gate, "").unwrap();
    });
    op.run(&mut io).unwrap();
    opener.join().unwrap();
    assert!(io.slept >= GATE_POLL, "it did not wait: {:?}", io.slept);
    assert_eq!(io.outputs, vec![int("a", 1)]);

    // A closed gate still gives way to cancellation.
    let closed = [("ms", "0"), ("until-exists", "/nonexistent/gate")];
    let mut op = build(SLEEP, &closed).unwrap();
    let mut io = TestIo::new(vec![int("a", 1)]);
    io.cancelled.store(true, Ordering::SeqCst);
    assert!(matches!(op.run(&mut io), Err(OperatorError::Cancelled)));
    assert!(io.outputs.is_empty());

    // `gate-after`: the first records pass, the rest wait; a subtask with no more never waits
    // (a canceller ends what waits).
    let after = [closed[0], closed[1], ("gate-after", "2")];
    let mut op = build(SLEEP, &after).unwrap();
    for (input, waits) in [
        (vec![int("a", 1), int("b", 2), int("c", 3)], true),
        (vec![int("a", 1), int("b", 2)], false),
    ] {
        let mut io = TestIo::new(input);
        let cancel = Arc::clone(&io.cancelled);
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cancel.store(true, Ordering::SeqCst);
        });
        let outcome = op.run(&mut io);
        canceller.join().unwrap();
        assert_eq!(
            matches!(outcome, Err(OperatorError::Cancelled)),
            waits,
            "{outcome:?}"
        );
        assert_eq!(io.outputs, vec![int("a", 1), int("b", 2)]);
    }
    assert_config_error(
        build(SLEEP, &[closed[0], closed[1], ("gate-after", "x")]),
        SLEEP,
        "gate-after",
    );
    assert_config_error(
        build(SLEEP, &[closed[0], ("gate-after", "2")]),
        SLEEP,
        "until-exists",
    );
}

#[test]
fn sequential_word_count_matches_a_hand_count() {
    let dir = TempDir::new("wc");
    let path = dir.0.join("in.txt");
    fs::write(
        &path,
        "The cat; the CAT's hat.\r\nÉcole école\n\n42 cats, 42\nStraße",
    )
    .unwrap();
    let expected: BTreeMap<String, u64> = [
        ("the", 2),
        ("cat", 2),
        ("s", 1),
        ("hat", 1),
        ("école", 2),
        ("42", 2),
        ("cats", 1),
        ("straße", 1),
    ]
    .into_iter()
    .map(|(w, n)| (w.to_owned(), n))
    .collect();
    assert_eq!(sequential_word_count(&path).unwrap(), expected);
    assert!(sequential_word_count(&dir.0.join("missing")).is_err());
}

#[test]
fn word_count_pipeline_matches_the_sequential_count() {
    let dir = TempDir::new("pipeline");
    let path = dir.0.join("in.txt");
    let content: String = (100..112).map(random_text).collect();
    fs::write(&path, &content).unwrap();
    let path_str = path.to_str().unwrap();
    let parallelism = 3;
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for subtask in 0..parallelism {
        let mut source = build(TEXT_SOURCE, &[("path", path_str)]).unwrap();
        let mut io = TestIo::new(vec![]).subtask(subtask, parallelism);
        source.run(&mut io).unwrap();
        let mut tokenize = build(TOKENIZE, &[]).unwrap();
        let mut io = TestIo::new(io.outputs);
        tokenize.run(&mut io).unwrap();
        let mut count = build(COUNT_BY_KEY, &[]).unwrap();
        let mut io = TestIo::new(io.outputs);
        count.run(&mut io).unwrap();
        for record in io.outputs {
            let Value::Int(n) = record.value else {
                panic!("not a count")
            };
            *merged.entry(record.key).or_insert(0) += u64::try_from(n).unwrap();
        }
    }
    assert_eq!(merged, sequential_word_count(&path).unwrap());
    assert!(!merged.is_empty());
}

#[test]
fn word_counts_agree_with_words_on_every_kind_of_word() {
    let lines = [
        "Straße ÉCOLE 42 don't stop—now, x1y2!",
        "ΣΑΣ σας Σας ΌΣΟΣ İstanbul ǅemal",
        "MiXeD mixed MIXED 日本語 Ünïcödé",
        "",
    ];
    let mut counts = WordCounts::default();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for line in lines {
        counts.add_line(line);
        for word in words(line) {
            *expected.entry(word).or_insert(0) += 1;
        }
    }
    assert_eq!(counts.len(), expected.len());
    let counted: BTreeMap<String, u64> = counts.drain().collect();
    assert_eq!(counted, expected);
    assert!(counts.is_empty(), "drained");
}

/// Issue 11 (WordCount throughput): `tokenize` with `combine` sums counts itself, emitting
/// each word once per flush (every `combine` distinct words, and at the end); the sums
/// downstream are the same as without it, from far fewer records.
#[test]
fn tokenize_with_a_combiner_emits_partial_counts_that_sum_to_the_same_counts() {
    let dir = TempDir::new("combine");
    let path = dir.0.join("in.txt");
    let content: String = (200..230).map(random_text).collect();
    fs::write(&path, &content).unwrap();
    let lines: Vec<Record> = content.lines().map(text).collect();

    let mut plain = build(TOKENIZE, &[]).unwrap();
    let mut plain_io = TestIo::new(lines.clone());
    plain.run(&mut plain_io).unwrap();
    for combine in ["1", "7", "100000"] {
        let mut op = build(TOKENIZE, &[("combine", combine)]).unwrap();
        let mut io = TestIo::new(lines.clone());
        op.run(&mut io).unwrap();
        let mut sums: BTreeMap<String, u64> = BTreeMap::new();
        for record in &io.outputs {
            let Value::Int(n) = record.value else {
                panic!("not a count: {record:?}")
            };
            *sums.entry(record.key.clone()).or_insert(0) += u64::try_from(n).unwrap();
        }
        assert_eq!(
            sums,
            sequential_word_count(&path).unwrap(),
            "combine = {combine}"
        );
        assert!(
            io.outputs.len() < plain_io.outputs.len(),
            "combine = {combine}: {} records, {} without",
            io.outputs.len(),
            plain_io.outputs.len()
        );
        if combine == "100000" {
            assert_eq!(
                io.outputs.len(),
                sums.len(),
                "one flush at the end: each word once"
            );
        }
    }
    assert_config_error(build(TOKENIZE, &[("combine", "many")]), TOKENIZE, "combine");
}

/// The combiner's output order is a function of its input: two counters fed the same lines
/// drain in the same order (a per-run random hash seed would make every run differ, and a
/// simulation seed unreplayable).
#[test]
fn word_counts_drain_in_the_same_order_for_the_same_input() {
    let lines: Vec<String> = (300..310).map(random_text).collect();
    let drained = || {
        let mut counts = WordCounts::default();
        for line in &lines {
            counts.add_line(line);
        }
        counts.drain().collect::<Vec<_>>()
    };
    assert_eq!(drained(), drained());
}
