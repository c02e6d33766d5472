use super::*;

const KNOWN: [&str; 7] = [
    "text-source",
    "tokenize",
    "count-by-key",
    "file-sink",
    "noop",
    "sleep",
    "fail-once",
];

fn known(operator: &str) -> bool {
    KNOWN.contains(&operator)
}

use DistributionPattern::{AllToAll, Forward};
use ExchangeMode::{Blocking, Pipelined};

/// source -> tokenize (forward) -> count (all-to-all) -> sink (forward), parallelism 2.
fn wordcount() -> JobGraphBuilder {
    let mut b = JobGraph::builder("wordcount");
    let source = b
        .vertex("source", "text-source", 2)
        .config("path", "in.txt")
        .index();
    let tokenize = b.vertex("tokenize", "tokenize", 2).index();
    let count = b.vertex("count", "count-by-key", 2).index();
    let sink = b
        .vertex("sink", "file-sink", 2)
        .config("path", "out.txt")
        .index();
    b.edge(source, tokenize, Forward, Pipelined)
        .edge(tokenize, count, AllToAll, Pipelined)
        .edge(count, sink, Forward, Blocking);
    b
}

fn graph() -> JobGraph {
    wordcount().build(known).unwrap()
}

fn exponential(initial: u64, max: u64, multiplier: f64, jitter: f64) -> RestartStrategyConfig {
    RestartStrategyConfig::ExponentialDelay {
        initial: Duration::from_millis(initial),
        max: Duration::from_millis(max),
        multiplier,
        jitter,
    }
}

/// Validates a graph that must fail and returns the error with its message.
fn refuse(graph: &JobGraph) -> (JobGraphError, String) {
    let err = graph.validate(known).unwrap_err();
    let text = err.to_string();
    (err, text)
}

#[test]
fn builder_makes_the_graph_it_was_told() {
    let mut b = JobGraph::builder("shared");
    let a = b
        .vertex("a", "noop", 3)
        .config("k", "v")
        .config("k", "w")
        .slot_sharing_group("g")
        .co_location_group("c")
        .index();
    let z = b
        .vertex("z", "noop", 3)
        .slot_sharing_group("g")
        .co_location_group("c")
        .index();
    b.edge(a, z, Forward, Blocking)
        .restart_strategy(RestartStrategyConfig::None);
    let graph = b.build(known).unwrap();

    assert_eq!(graph.name, "shared");
    assert_eq!((a.as_usize(), z.as_usize()), (0, 1));
    let vertex = &graph.vertices[0];
    assert_eq!(vertex.name, "a");
    assert_eq!(vertex.operator, "noop");
    assert_eq!(vertex.parallelism, 3);
    assert_eq!(vertex.config.get("k").map(String::as_str), Some("w"));
    assert_eq!(vertex.slot_sharing_group, "g");
    assert_eq!(vertex.co_location_group.as_deref(), Some("c"));
    assert_eq!(
        graph.edges,
        vec![JobEdge {
            source: 0,
            target: 1,
            pattern: Forward,
            exchange: Blocking
        }]
    );
    assert_eq!(graph.restart_strategy, RestartStrategyConfig::None);
}

#[test]
fn builder_defaults_to_the_default_group_and_restart_strategy() {
    let graph = graph();
    assert!(graph.vertices.iter().all(
        |v| v.slot_sharing_group == DEFAULT_SLOT_SHARING_GROUP && v.co_location_group.is_none()
    ));
    assert_eq!(graph.restart_strategy, RestartStrategyConfig::default());
}

#[test]
fn vertex_ids_are_fnv1a_of_the_name_and_deterministic() {
    let graph = graph();
    assert_eq!(graph.vertices[0].id, JobVertex::id_for("source"));
    assert_eq!(
        JobVertex::id_for("source").as_u128(),
        u128::from(fnv1a(b"source")) << 64
    );
    assert_eq!(graph, self::graph());
    assert_ne!(graph.vertices[0].id, graph.vertices[1].id);
}

#[test]
fn topological_order_follows_edges_lowest_index_first() {
    assert_eq!(graph().topological_order(), vec![0, 1, 2, 3]);

    // Vertices added in reverse: the order still follows the edges.
    let mut b = JobGraph::builder("diamond");
    let sink = b.vertex("sink", "noop", 1).index();
    let right = b.vertex("right", "noop", 1).index();
    let left = b.vertex("left", "noop", 1).index();
    let top = b.vertex("top", "noop", 1).index();
    let lone = b.vertex("lone", "noop", 1).index();
    b.edge(top, left, Forward, Pipelined)
        .edge(top, right, Forward, Pipelined)
        .edge(left, sink, Forward, Pipelined)
        .edge(right, sink, Forward, Pipelined);
    let graph = b.build(known).unwrap();
    assert_eq!(graph.topological_order(), vec![3, 1, 2, 0, 4]);
    assert_eq!(lone.as_usize(), 4);
    assert_eq!(graph.sources(), vec![3, 4]);
    assert_eq!(graph.sinks(), vec![0, 4]);
}

#[test]
fn inputs_and_outputs_list_edges_with_their_indices() {
    let graph = graph();
    let inputs = graph.inputs_of(2);
    assert_eq!(inputs.len(), 1);
    assert_eq!((inputs[0].0, inputs[0].1.source), (1, 1));
    let outputs = graph.outputs_of(2);
    assert_eq!((outputs[0].0, outputs[0].1.target), (2, 3));
    assert!(graph.inputs_of(0).is_empty());
    assert!(graph.outputs_of(3).is_empty());
    assert_eq!(graph.sources(), vec![0]);
    assert_eq!(graph.sinks(), vec![3]);
    assert_eq!(graph.vertex_index("count"), Some(2));
    assert_eq!(graph.vertex_index("nope"), None);
}

#[test]
fn empty_graph_is_refused() {
    let err = JobGraph::builder("nothing").build(known).unwrap_err();
    assert!(matches!(err, JobGraphError::Empty { .. }));
    assert!(
        err.to_string().contains("`nothing` has no vertices"),
        "{err}"
    );
}

#[test]
fn duplicate_vertex_name_is_refused() {
    let mut graph = graph();
    graph.vertices[3] = JobVertex::new("count", "file-sink", 2);
    let (err, text) = refuse(&graph);
    assert!(matches!(
        err,
        JobGraphError::DuplicateVertexName {
            first: 2,
            second: 3,
            ..
        }
    ));
    assert!(text.contains("`count`"), "{text}");
}

#[test]
fn duplicate_vertex_id_is_refused() {
    let mut graph = graph();
    graph.vertices[3].id = graph.vertices[0].id;
    let (err, text) = refuse(&graph);
    assert!(matches!(err, JobGraphError::DuplicateVertexId { .. }));
    assert!(
        text.contains("`source`") && text.contains("`sink`"),
        "{text}"
    );
}

#[test]
fn zero_parallelism_names_the_vertex() {
    let mut graph = graph();
    graph.vertices[1].parallelism = 0;
    let (err, text) = refuse(&graph);
    assert_eq!(
        err,
        JobGraphError::ZeroParallelism {
            vertex: "tokenize".into()
        }
    );
    assert!(text.contains("`tokenize` has parallelism 0"), "{text}");
}

#[test]
fn ten_million_subtasks_are_refused_with_the_total_and_the_limit() {
    let mut b = JobGraph::builder("huge");
    for v in 0..100 {
        b.vertex(format!("v{v}"), "noop", MAX_PARALLELISM);
    }
    let (err, text) = match b.build(known) {
        Err(err) => (err.clone(), err.to_string()),
        Ok(_) => panic!("ten million subtasks were accepted"),
    };
    assert_eq!(
        err,
        JobGraphError::TooManySubtasks {
            job: "huge".into(),
            subtasks: 10_000_000
        }
    );
    assert!(text.contains("10000000 subtasks"), "{text}");
    assert!(text.contains("limit of 1000000"), "{text}");
}

#[test]
fn parallelism_over_the_limit_names_the_vertex() {
    let mut graph = graph();
    graph.vertices[2].parallelism = MAX_PARALLELISM + 1;
    let (err, text) = refuse(&graph);
    assert!(matches!(
        err,
        JobGraphError::ParallelismTooHigh {
            parallelism: 100_001,
            ..
        }
    ));
    assert!(
        text.contains("`count`") && text.contains("100000"),
        "{text}"
    );
}

#[test]
fn unknown_operator_names_vertex_and_operator() {
    let mut b = JobGraph::builder("typo");
    b.vertex("source", "text-sauce", 1);
    let err = b.build(known).unwrap_err();
    assert!(matches!(err, JobGraphError::UnknownOperator { .. }));
    let text = err.to_string();
    assert!(
        text.contains("`source`") && text.contains("`text-sauce`"),
        "{text}"
    );
}

#[test]
fn edge_to_an_unknown_vertex_index_is_refused() {
    let mut graph = graph();
    graph.edges[1].target = 9;
    let (err, text) = refuse(&graph);
    assert_eq!(
        err,
        JobGraphError::UnknownVertex {
            edge: 1,
            index: 9,
            vertices: 4
        }
    );
    assert!(text.contains("edge 1 refers to vertex 9"), "{text}");
}

#[test]
fn self_loop_names_the_vertex() {
    let mut b = wordcount();
    let count = VertexIndex(2);
    b.edge(count, count, AllToAll, Pipelined);
    let err = b.build(known).unwrap_err();
    assert!(matches!(err, JobGraphError::SelfLoop { edge: 3, .. }));
    assert!(err.to_string().contains("`count` to itself"), "{err}");
}

#[test]
fn cycle_names_the_vertices_on_it_in_order() {
    let mut b = wordcount();
    b.edge(VertexIndex(2), VertexIndex(0), AllToAll, Pipelined);
    let err = b.build(known).unwrap_err();
    assert_eq!(
        err,
        JobGraphError::Cycle {
            vertices: vec!["source".into(), "tokenize".into(), "count".into()]
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("`source` -> `tokenize` -> `count` -> `source`"),
        "{text}"
    );
}

#[test]
fn cycle_downstream_of_a_source_is_found() {
    // source -> a -> b -> a, b -> sink: the walk must skip the ordered source.
    let mut b = JobGraph::builder("loop");
    let source = b.vertex("source", "noop", 1).index();
    let x = b.vertex("b", "noop", 1).index();
    let y = b.vertex("a", "noop", 1).index();
    let sink = b.vertex("sink", "noop", 1).index();
    b.edge(source, y, Forward, Pipelined)
        .edge(y, x, Forward, Pipelined)
        .edge(x, y, Forward, Pipelined)
        .edge(x, sink, Forward, Pipelined);
    let err = b.build(known).unwrap_err();
    assert_eq!(
        err,
        JobGraphError::Cycle {
            vertices: vec!["b".into(), "a".into()]
        }
    );
}

#[test]
fn forward_edge_between_different_parallelisms_names_both() {
    let mut graph = graph();
    graph.vertices[3].parallelism = 3;
    let (err, text) = refuse(&graph);
    assert_eq!(
        err,
        JobGraphError::ForwardParallelismMismatch {
            from: "count".into(),
            from_parallelism: 2,
            to: "sink".into(),
            to_parallelism: 3
        }
    );
    assert!(
        text.contains("`count` -> `sink` joins parallelism 2 to 3"),
        "{text}"
    );
}

#[test]
fn all_to_all_edge_between_different_parallelisms_is_fine() {
    let mut graph = graph();
    graph.vertices[2].parallelism = 5;
    graph.edges[2].pattern = AllToAll;
    graph.validate(known).unwrap();
}

#[test]
fn duplicate_edge_is_refused() {
    let mut b = wordcount();
    b.edge(VertexIndex(1), VertexIndex(2), Forward, Blocking);
    let err = b.build(known).unwrap_err();
    assert!(matches!(
        err,
        JobGraphError::DuplicateEdge {
            first: 1,
            second: 3,
            ..
        }
    ));
    assert!(err.to_string().contains("`tokenize` -> `count`"), "{err}");
}

#[test]
fn co_location_group_needs_one_parallelism() {
    let mut b = JobGraph::builder("colocated");
    b.vertex("a", "noop", 2).co_location_group("c");
    b.vertex("b", "noop", 2);
    b.vertex("z", "noop", 3).co_location_group("c");
    let err = b.build(known).unwrap_err();
    assert!(matches!(err, JobGraphError::CoLocationParallelism { .. }));
    let text = err.to_string();
    assert!(
        text.contains("`c`")
            && text.contains("`a` (parallelism 2)")
            && text.contains("`z` (parallelism 3)"),
        "{text}"
    );
}

#[test]
fn co_location_group_needs_one_slot_sharing_group() {
    let mut b = JobGraph::builder("colocated");
    b.vertex("a", "noop", 2).co_location_group("c");
    b.vertex("z", "noop", 2)
        .co_location_group("c")
        .slot_sharing_group("other");
    let err = b.build(known).unwrap_err();
    assert!(matches!(err, JobGraphError::CoLocationSlotSharing { .. }));
    let text = err.to_string();
    assert!(
        text.contains("`default`") && text.contains("`other`"),
        "{text}"
    );
}

fn restart_error(strategy: RestartStrategyConfig) -> (&'static str, String) {
    let mut b = wordcount();
    b.restart_strategy(strategy);
    match b.build(known) {
        Err(err @ JobGraphError::InvalidRestartStrategy { key, .. }) => (key, err.to_string()),
        other => panic!("expected an invalid restart strategy, got {other:?}"),
    }
}

#[test]
fn restart_multiplier_below_one_is_refused() {
    let (key, text) = restart_error(exponential(1000, 60_000, 0.5, 0.1));
    assert_eq!(key, "restart-strategy.multiplier");
    assert!(text.contains("= 0.5"), "{text}");
    let (key, _) = restart_error(exponential(1000, 60_000, f64::INFINITY, 0.1));
    assert_eq!(key, "restart-strategy.multiplier");
}

#[test]
fn restart_jitter_outside_zero_to_one_is_refused() {
    let (key, text) = restart_error(exponential(1000, 60_000, 1.5, 1.5));
    assert_eq!(key, "restart-strategy.jitter");
    assert!(text.contains("= 1.5"), "{text}");
    let (key, _) = restart_error(exponential(1000, 60_000, 1.5, -0.1));
    assert_eq!(key, "restart-strategy.jitter");
    let (key, _) = restart_error(exponential(1000, 60_000, 1.5, f64::NAN));
    assert_eq!(key, "restart-strategy.jitter");
}

#[test]
fn restart_max_below_initial_is_refused() {
    let (key, text) = restart_error(exponential(2000, 1000, 1.5, 0.1));
    assert_eq!(key, "restart-strategy.max");
    assert!(text.contains("restart-strategy.initial (2s)"), "{text}");
}

#[test]
fn restart_initial_of_zero_is_refused() {
    let (key, _) = restart_error(exponential(0, 1000, 1.5, 0.1));
    assert_eq!(key, "restart-strategy.initial");
}

#[test]
fn codec_round_trips_a_graph() {
    let mut b = wordcount();
    b.restart_strategy(RestartStrategyConfig::FixedDelay {
        attempts: 3,
        delay: Duration::from_millis(500),
    });
    b.vertex("extra", "sleep", 1).co_location_group("c");
    let graph = b.build(known).unwrap();
    let bytes = crate::base::codec::encode(&graph).unwrap();
    let decoded: JobGraph = crate::base::codec::decode(&bytes).unwrap();
    assert_eq!(decoded, graph);
    let default = RestartStrategyConfig::default();
    let decoded: RestartStrategyConfig =
        crate::base::codec::decode(&crate::base::codec::encode(&default).unwrap()).unwrap();
    assert_eq!(decoded, default);
}
