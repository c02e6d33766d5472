use super::*;
use crate::job::graph::{JobEdge, JobVertex};

const WORDCOUNT: &str = include_str!("../../../examples/wordcount.toml");

fn known(operator: &str) -> bool {
    [
        "text-source",
        "tokenize",
        "count-by-key",
        "file-sink",
        "noop",
        "sleep",
        "fail-once",
    ]
    .contains(&operator)
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn wordcount_params() -> BTreeMap<String, String> {
    params(&[("input", "in.txt"), ("output", "out/counts.txt")])
}

fn parse(text: &str) -> Result<JobGraph, JobFileError> {
    parse_job_file(text, &wordcount_params(), known)
}

/// The error and its whole chain, as the CLI prints it.
fn refuse(text: &str) -> (JobFileError, String) {
    let err = parse(text).unwrap_err();
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    (err, message)
}

/// A one-vertex job with `extra` appended.
fn job_with(extra: &str) -> String {
    format!("name = \"job\"\n[[vertex]]\nname = \"a\"\noperator = \"noop\"\n{extra}")
}

fn edge(from: &str, to: &str, pattern: &str) -> String {
    format!("[[edge]]\nfrom = \"{from}\"\nto = \"{to}\"\npattern = \"{pattern}\"\n")
}

#[test]
fn wordcount_example_parses_with_its_parameters() {
    let graph = parse(WORDCOUNT).unwrap();
    assert_eq!(graph.name, "wordcount");
    let names: Vec<&str> = graph.vertices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["source", "tokenize", "count", "sink"]);
    let operators: Vec<&str> = graph.vertices.iter().map(|v| v.operator.as_str()).collect();
    assert_eq!(
        operators,
        ["text-source", "tokenize", "count-by-key", "file-sink"]
    );
    assert!(graph.vertices.iter().all(|v| v.parallelism == 2));
    assert_eq!(graph.vertices[0].config["path"], "in.txt");
    assert_eq!(graph.vertices[3].config["path"], "out/counts.txt");
    assert_eq!(graph.vertices[0].id, JobVertex::id_for("source"));
    let edge = |source, target, pattern| JobEdge {
        source,
        target,
        pattern,
        exchange: ExchangeMode::Pipelined,
    };
    assert_eq!(
        graph.edges,
        vec![
            edge(0, 1, DistributionPattern::Forward),
            edge(1, 2, DistributionPattern::AllToAll),
            edge(2, 3, DistributionPattern::Forward),
        ]
    );
    assert_eq!(
        graph.restart_strategy,
        RestartStrategyConfig::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(500)
        }
    );
    assert_eq!(graph.topological_order(), vec![0, 1, 2, 3]);
}

#[test]
fn read_job_file_reads_the_example_from_disk() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/wordcount.toml");
    let graph = read_job_file(&path, &wordcount_params(), known).unwrap();
    assert_eq!(graph, parse(WORDCOUNT).unwrap());
}

#[test]
fn unreadable_file_names_the_path() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/no-such-job.toml");
    let err = read_job_file(&path, &wordcount_params(), known).unwrap_err();
    assert!(matches!(err, JobFileError::Read { .. }));
    assert!(err.to_string().contains("no-such-job.toml"), "{err}");
}

#[test]
fn defaults_fill_what_the_file_leaves_out() {
    let text =
        job_with("[[vertex]]\nname = \"b\"\noperator = \"noop\"\n") + &edge("a", "b", "all-to-all");
    let graph = parse(&text).unwrap();
    assert_eq!(graph.vertices[0].parallelism, 1);
    assert_eq!(graph.vertices[0].slot_sharing_group, "default");
    assert_eq!(graph.vertices[0].co_location_group, None);
    assert!(graph.vertices[0].config.is_empty());
    assert_eq!(graph.edges[0].exchange, ExchangeMode::Pipelined);
    assert_eq!(graph.restart_strategy, RestartStrategyConfig::default());
}

#[test]
fn restart_strategies_read_every_type_with_defaults() {
    let strategy = |section: &str| parse(&job_with(section)).unwrap().restart_strategy;
    assert_eq!(
        strategy("[restart-strategy]\ntype = \"none\"\n"),
        RestartStrategyConfig::None
    );
    assert_eq!(
        strategy("[restart-strategy]\ntype = \"fixed-delay\"\n"),
        RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::from_secs(1)
        }
    );
    assert_eq!(
        strategy(
            "[restart-strategy]\ntype = \"exponential-delay\"\ninitial = 250\n\
             max = \"2min\"\nmultiplier = 2\njitter = 0.0\n"
        ),
        RestartStrategyConfig::ExponentialDelay {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(120),
            multiplier: 2.0,
            jitter: 0.0
        }
    );
}

#[test]
fn vertex_groups_and_exchange_are_read() {
    let text = job_with(
        "parallelism = 3\nslot-sharing-group = \"g\"\nco-location-group = \"c\"\n\
         [[vertex]]\nname = \"b\"\noperator = \"sleep\"\nparallelism = 3\n\
         slot-sharing-group = \"g\"\nco-location-group = \"c\"\n",
    ) + &edge("a", "b", "forward")
        + "exchange = \"blocking\"\n";
    let graph = parse(&text).unwrap();
    assert_eq!(graph.vertices[1].slot_sharing_group, "g");
    assert_eq!(graph.vertices[1].co_location_group.as_deref(), Some("c"));
    assert_eq!(graph.edges[0].exchange, ExchangeMode::Blocking);
}

#[test]
fn parameters_fill_any_string_and_dollar_dollar_brace_escapes() {
    let text = "name = \"${job}-run\"\n[[vertex]]\nname = \"${v}\"\noperator = \"${op}\"\n\
                config.a = \"$${literal} and ${v}\"\nconfig.b = \"cost: $5, $$ and $\"\n\
                config.c = \"${v}${v}\"\n";
    let values = params(&[("job", "wc"), ("v", "x"), ("op", "noop"), ("unused", "1")]);
    let graph = parse_job_file(text, &values, known).unwrap();
    assert_eq!(graph.name, "wc-run");
    assert_eq!(graph.vertices[0].name, "x");
    assert_eq!(graph.vertices[0].operator, "noop");
    assert_eq!(graph.vertices[0].config["a"], "${literal} and x");
    assert_eq!(graph.vertices[0].config["b"], "cost: $5, $$ and $");
    assert_eq!(graph.vertices[0].config["c"], "xx");
}

#[test]
fn parameter_values_are_not_expanded_again() {
    let text = job_with("config.path = \"${input}\"\n");
    let values = params(&[("input", "${output}")]);
    let graph = parse_job_file(&text, &values, known).unwrap();
    assert_eq!(graph.vertices[0].config["path"], "${output}");
}

#[test]
fn malformed_toml_points_at_the_line() {
    let (err, text) = refuse("name = \"job\"\n[[vertex]\nname = \"a\"\n");
    assert!(matches!(err, JobFileError::Parse(_)));
    assert!(text.contains("line 2"), "{text}");
}

#[test]
fn wrong_type_points_at_the_key() {
    let (err, text) = refuse(&job_with("parallelism = \"two\"\n"));
    assert!(matches!(err, JobFileError::Parse(_)));
    assert!(
        text.contains("line 5") && text.contains("parallelism"),
        "{text}"
    );
}

#[test]
fn unknown_key_is_refused_with_its_name() {
    let (err, text) = refuse(&job_with("paralelism = 2\n"));
    assert!(matches!(err, JobFileError::Parse(_)));
    assert!(
        text.contains("paralelism") && text.contains("line 5"),
        "{text}"
    );
    let (err, text) = refuse(&job_with(
        "[restart-strategy]\ntype = \"none\"\nretries = 1\n",
    ));
    assert!(matches!(err, JobFileError::Parse(_)));
    assert!(text.contains("retries"), "{text}");
}

#[test]
fn missing_parameter_names_it_and_lists_the_given_ones() {
    let err = parse_job_file(WORDCOUNT, &params(&[("input", "in.txt")]), known).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, JobFileError::MissingParameter { name, .. } if name == "output"),
        "{err:?}"
    );
    assert!(text.contains("`${output}`"), "{text}");
    assert!(text.contains("vertex `sink` config.path"), "{text}");
    assert!(text.contains("given: input"), "{text}");

    let err = parse_job_file(WORDCOUNT, &BTreeMap::new(), known).unwrap_err();
    assert!(
        err.to_string().contains("no parameters were given"),
        "{err}"
    );
}

#[test]
fn malformed_parameter_is_refused() {
    for value in ["${input", "${}", "${in put}"] {
        let (err, text) = refuse(&job_with(&format!("config.path = \"{value}\"\n")));
        assert!(
            matches!(err, JobFileError::BadParameter { .. }),
            "{value}: {err:?}"
        );
        assert!(text.contains("vertex `a` config.path"), "{text}");
    }
}

#[test]
fn edge_naming_an_unknown_vertex_names_it() {
    let text = WORDCOUNT.replace("to = \"count\"", "to = \"counter\"");
    let (err, text) = refuse(&text);
    assert!(
        matches!(&err, JobFileError::UnknownVertex { missing, .. } if missing == "counter"),
        "{err:?}"
    );
    assert!(text.contains("`counter`, which is not defined"), "{text}");
    assert!(text.contains("count, sink, source, tokenize"), "{text}");
}

#[test]
fn unknown_operator_names_vertex_and_operator() {
    let text = WORDCOUNT.replace("\"count-by-key\"", "\"count-by-word\"");
    let (err, text) = refuse(&text);
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::UnknownOperator { .. })
    ));
    assert!(
        text.contains("`count`") && text.contains("`count-by-word`"),
        "{text}"
    );
}

#[test]
fn cycle_names_its_vertices() {
    let text = format!("{WORDCOUNT}\n{}", edge("sink", "tokenize", "all-to-all"));
    let (err, text) = refuse(&text);
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::Cycle { .. })
    ));
    assert!(
        text.contains("`tokenize` -> `count` -> `sink` -> `tokenize`"),
        "{text}"
    );
}

#[test]
fn forward_edge_between_different_parallelisms_names_both() {
    let text = WORDCOUNT.replacen("parallelism = 2", "parallelism = 4", 1);
    let (err, text) = refuse(&text);
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::ForwardParallelismMismatch { .. })
    ));
    assert!(
        text.contains("`source` -> `tokenize` joins parallelism 4 to 2"),
        "{text}"
    );
}

#[test]
fn parallelism_zero_names_the_vertex() {
    let (err, text) = refuse(&job_with("parallelism = 0\n"));
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::ZeroParallelism { .. })
    ));
    assert!(text.contains("`a` has parallelism 0"), "{text}");
}

#[test]
fn bad_duration_names_the_key() {
    let text = WORDCOUNT.replace("delay = \"500ms\"", "delay = \"soon\"");
    let (err, text) = refuse(&text);
    assert!(matches!(
        err,
        JobFileError::InvalidDuration {
            key: "restart-strategy.delay",
            ..
        }
    ));
    assert!(text.contains("\"soon\" is not a duration"), "{text}");
}

#[test]
fn negative_or_fractional_duration_points_at_the_line() {
    for value in ["-5", "1.5", "true"] {
        let text = WORDCOUNT.replace("delay = \"500ms\"", &format!("delay = {value}"));
        let (err, text) = refuse(&text);
        assert!(matches!(err, JobFileError::Parse(_)), "{value}: {err:?}");
        assert!(
            text.contains("expected a duration") && text.contains("delay"),
            "{text}"
        );
    }
}

#[test]
fn durations_take_parameters() {
    let text = WORDCOUNT.replace("delay = \"500ms\"", "delay = \"${pause}\"");
    let mut values = wordcount_params();
    values.insert("pause".into(), "2s".into());
    let graph = parse_job_file(&text, &values, known).unwrap();
    assert!(matches!(
        graph.restart_strategy,
        RestartStrategyConfig::FixedDelay { delay, .. } if delay == Duration::from_secs(2)
    ));
}

#[test]
fn invalid_pattern_names_the_edge() {
    let text = WORDCOUNT.replace("\"all-to-all\"", "\"shuffle\"");
    let (err, text) = refuse(&text);
    assert!(matches!(err, JobFileError::InvalidPattern { .. }));
    assert!(
        text.contains("`tokenize` -> `count`") && text.contains("\"shuffle\""),
        "{text}"
    );
}

#[test]
fn invalid_exchange_names_the_edge() {
    let text = WORDCOUNT.replacen("\"pipelined\"", "\"streaming\"", 1);
    let (err, text) = refuse(&text);
    assert!(matches!(err, JobFileError::InvalidExchange { .. }));
    assert!(
        text.contains("`source` -> `tokenize`") && text.contains("\"streaming\""),
        "{text}"
    );
}

#[test]
fn invalid_restart_type_is_refused() {
    let text = WORDCOUNT.replace("\"fixed-delay\"", "\"fixed\"");
    let (err, text) = refuse(&text);
    assert!(matches!(err, JobFileError::InvalidRestartType { .. }));
    assert!(text.contains("restart-strategy.type = \"fixed\""), "{text}");
}

#[test]
fn restart_key_of_another_type_is_refused() {
    let text = WORDCOUNT.replace("attempts = 3", "attempts = 3\nmultiplier = 2.0");
    let (err, text) = refuse(&text);
    assert!(matches!(
        err,
        JobFileError::RestartKeyNotApplicable {
            key: "multiplier",
            ..
        }
    ));
    assert!(
        text.contains("\"fixed-delay\", which takes: attempts, delay"),
        "{text}"
    );
}

#[test]
fn invalid_restart_values_are_graph_errors() {
    let (err, text) = refuse(&job_with(
        "[restart-strategy]\ntype = \"exponential-delay\"\njitter = 2.0\n",
    ));
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::InvalidRestartStrategy { .. })
    ));
    assert!(text.contains("restart-strategy.jitter = 2"), "{text}");
}

#[test]
fn duplicate_vertex_name_is_refused() {
    let text = job_with("[[vertex]]\nname = \"a\"\noperator = \"noop\"\n");
    let (err, text) = refuse(&text);
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::DuplicateVertexName { .. })
    ));
    assert!(text.contains("`a`"), "{text}");
}

#[test]
fn file_without_vertices_is_refused() {
    let (err, _) = refuse("name = \"empty\"\n");
    assert!(matches!(
        err,
        JobFileError::Graph(e) if matches!(*e, JobGraphError::Empty { .. })
    ));
}
