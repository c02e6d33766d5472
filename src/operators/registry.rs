//! The operator registry: operator name → factory.
//!
//! A job graph names its operators by string, so a job can be described, shipped and stored as
//! data; the registry turns a name and its configuration into a running [`Operator`] on the
//! TaskManager. Users register their own operators under their own names in their own binary, next
//! to the built-ins ([`super::builtin`]). The registry only creates operators: it must never run
//! them or hold per-job state.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::{Operator, OperatorError};

/// Everything a factory needs to create one subtask's operator instance.
///
/// Borrowed, because the job graph owns the configuration and a factory only reads it while
/// validating and copying what it keeps.
#[derive(Debug, Clone, Copy)]
pub struct OperatorSpec<'a> {
    /// The registered name of the operator (as the job graph wrote it), so errors can name it.
    pub name: &'a str,
    /// The vertex's configuration: string key/values, interpreted by the operator.
    pub config: &'a BTreeMap<String, String>,
    /// The subtask the instance is created for, from 0.
    pub subtask: u32,
    /// How many subtasks the vertex has.
    pub parallelism: u32,
}

/// Creates one operator instance from its spec; fails with [`OperatorError::Config`] on a bad
/// configuration, so a wrong job is refused before anything runs.
///
/// An `Arc` so a registry is cheap to clone into every TaskManager and task thread.
pub type OperatorFactory =
    Arc<dyn Fn(&OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> + Send + Sync>;

/// Operator name → factory, so job graphs can name operators as data.
///
/// Cloning is cheap (the map is shared behind an `Arc` and copied only when a clone registers
/// something), so each TaskManager can hold its own handle.
#[derive(Clone, Default)]
pub struct OperatorRegistry {
    factories: Arc<BTreeMap<String, OperatorFactory>>,
}

impl OperatorRegistry {
    /// An empty registry, for binaries (and tests) that want full control over what can run.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with every built-in operator ([`super::builtin::BUILTIN_OPERATORS`]), the usual
    /// starting point before registering user operators.
    pub fn with_builtins() -> Self {
        let mut registry = Self::new();
        super::builtin::register_builtins(&mut registry);
        registry
    }

    /// Registers `factory` under `name`.
    ///
    /// Registering a name that is already taken **replaces** the old factory and returns it, so a
    /// binary can deliberately override a built-in (say, a `file-sink` that writes elsewhere);
    /// callers that want to refuse overrides check [`contains`](Self::contains) first or look at
    /// the returned value.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        factory: OperatorFactory,
    ) -> Option<OperatorFactory> {
        Arc::make_mut(&mut self.factories).insert(name.into(), factory)
    }

    /// [`register`](Self::register) for a plain closure or function, so callers need not wrap it
    /// in an `Arc` themselves.
    pub fn register_fn<F>(&mut self, name: impl Into<String>, factory: F) -> Option<OperatorFactory>
    where
        F: Fn(&OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError>
            + Send
            + Sync
            + 'static,
    {
        self.register(name, Arc::new(factory))
    }

    /// Whether an operator is registered under `name`, so a job can be validated at submission.
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// What a TaskManager with this registry can run (see
    /// [`Fingerprint`](crate::messages::job_manager::Fingerprint)).
    pub fn fingerprint(&self) -> crate::messages::job_manager::Fingerprint {
        // Hashing the executable costs ~2 s for a 400 MiB debug build: only a registry with a
        // program's operators (whose identities carry the build already) pays for it; the
        // built-ins are the same in every build of one version.
        let has_programs = self
            .factories
            .keys()
            .any(|name| name.starts_with("program:"));
        crate::messages::job_manager::Fingerprint {
            build: if has_programs {
                crate::env::build::build_id().to_owned()
            } else {
                format!("v{}", env!("CARGO_PKG_VERSION"))
            },
            operators: self.factories.keys().cloned().collect(),
        }
    }

    /// The registered names, sorted, for error messages and the REST API.
    pub fn names(&self) -> Vec<&str> {
        self.factories.keys().map(String::as_str).collect()
    }

    /// Creates the operator instance `spec` describes.
    ///
    /// An unknown name is a configuration error (not retryable) that names the operator and
    /// lists the known ones, since it is almost always a typo or a missing registration.
    pub fn create(&self, spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
        match self.factories.get(spec.name) {
            Some(factory) => factory(spec),
            None => Err(OperatorError::Config {
                operator: spec.name.to_owned(),
                message: format!(
                    "no operator is registered under this name (known operators: {})",
                    if self.factories.is_empty() {
                        "none".to_owned()
                    } else {
                        self.names().join(", ")
                    }
                ),
            }),
        }
    }
}

impl fmt::Debug for OperatorRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorRegistry")
            .field("operators", &self.names())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::TaskIo;
    use crate::operators::builtin::BUILTIN_OPERATORS;

    struct Nothing;

    impl Operator for Nothing {
        fn run(&mut self, _io: &mut dyn TaskIo) -> Result<(), OperatorError> {
            Ok(())
        }
    }

    fn spec<'a>(name: &'a str, config: &'a BTreeMap<String, String>) -> OperatorSpec<'a> {
        OperatorSpec {
            name,
            config,
            subtask: 0,
            parallelism: 1,
        }
    }

    #[test]
    fn builtins_are_registered() {
        let registry = OperatorRegistry::with_builtins();
        for name in BUILTIN_OPERATORS {
            assert!(registry.contains(name), "{name} missing");
        }
        assert_eq!(registry.names().len(), BUILTIN_OPERATORS.len());
        let config = BTreeMap::new();
        assert!(registry.create(&spec("tokenize", &config)).is_ok());
        assert!(format!("{registry:?}").contains("count-by-key"));
    }

    #[test]
    fn unknown_operator_names_it_and_lists_known_ones() {
        let registry = OperatorRegistry::with_builtins();
        let config = BTreeMap::new();
        let err = registry
            .create(&spec("tokenise", &config))
            .err()
            .expect("unknown operator must fail");
        match &err {
            OperatorError::Config { operator, message } => {
                assert_eq!(operator, "tokenise");
                assert!(message.contains("tokenize"), "{message}");
                assert!(message.contains("text-source"), "{message}");
            }
            other => panic!("expected a config error, got {other:?}"),
        }
        let empty = OperatorRegistry::new().create(&spec("x", &config)).err();
        assert!(
            empty
                .expect("empty registry knows nothing")
                .to_string()
                .contains("known operators: none")
        );
    }

    #[test]
    fn user_operators_register_and_replace() {
        let mut registry = OperatorRegistry::new();
        assert!(
            registry
                .register_fn("mine", |_| Ok(Box::new(Nothing)))
                .is_none()
        );
        assert!(registry.contains("mine"));
        let config = BTreeMap::new();
        assert!(registry.create(&spec("mine", &config)).is_ok());

        // A clone keeps its own view once either side registers more.
        let snapshot = registry.clone();
        let old = registry.register_fn("mine", |spec| {
            Err(OperatorError::Failed(format!("replaced {}", spec.name)))
        });
        assert!(old.is_some(), "replacing returns the old factory");
        let err = registry.create(&spec("mine", &config)).err();
        assert_eq!(err.map(|e| e.to_string()).as_deref(), Some("replaced mine"));
        assert!(snapshot.create(&spec("mine", &config)).is_ok());
        assert_eq!(registry.names(), vec!["mine"]);
    }

    #[test]
    fn factories_see_the_spec() {
        let mut registry = OperatorRegistry::new();
        registry.register_fn("check", |spec| {
            if spec.subtask == 2 && spec.parallelism == 3 && spec.config.contains_key("k") {
                Ok(Box::new(Nothing) as Box<dyn Operator>)
            } else {
                Err(OperatorError::Failed(format!("{spec:?}")))
            }
        });
        let config = BTreeMap::from([("k".to_owned(), "v".to_owned())]);
        let spec = OperatorSpec {
            name: "check",
            config: &config,
            subtask: 2,
            parallelism: 3,
        };
        assert!(registry.create(&spec).is_ok());
    }
}
