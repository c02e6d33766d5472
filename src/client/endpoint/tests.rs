use std::collections::BTreeMap;

use super::*;

fn url(text: &str) -> Result<String, &'static str> {
    text.parse::<JobManagerUrl>().map(|u| u.0)
}

#[test]
fn urls_and_bare_host_ports_are_accepted() {
    assert_eq!(url("http://10.0.0.5:8081").unwrap(), "http://10.0.0.5:8081");
    assert_eq!(
        url("http://10.0.0.5:8081/").unwrap(),
        "http://10.0.0.5:8081"
    );
    assert_eq!(url("10.0.0.5:8081").unwrap(), "http://10.0.0.5:8081");
    assert_eq!(url(" localhost:1 ").unwrap(), "http://localhost:1");
    assert_eq!(url("[::1]:8081").unwrap(), "http://[::1]:8081");
    assert_eq!(url("http://jm.example").unwrap(), "http://jm.example");
    assert_eq!(
        url("http://proxy:80/flint/").unwrap(),
        "http://proxy:80/flint"
    );
}

#[test]
fn unusable_addresses_say_what_is_accepted() {
    assert!(url("https://jm:8081").unwrap_err().contains("plain HTTP"));
    assert!(
        url("ftp://jm:8081")
            .unwrap_err()
            .contains("http://HOST:PORT")
    );
    assert!(url("jm").unwrap_err().contains("no port"));
    assert!(url("jm:http").unwrap_err().contains("port"));
    assert!(url("jm:99999").unwrap_err().contains("65535"));
    assert!(url("").is_err());
    assert!(url("http://").is_err());
    assert!(url("::1:8081").is_err());
    assert!(url("jm:8081/x").unwrap_err().contains("http://"));
}

fn resolve(
    flag: Option<&str>,
    config: Option<&Path>,
    vars: &[(&str, &str)],
) -> Result<Endpoint, EndpointError> {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Endpoint::resolve(flag, config, |k| vars.get(k).cloned())
}

/// A configuration file in the temp directory, removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "flint-client-endpoint-{name}-{}.toml",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_flag_wins_over_the_variable_over_the_file_over_the_default() {
    let file = ConfigFile::new(
        "precedence",
        "[rest]\naddress = \"10.1.1.1\"\nport = 9000\ntoken = \"from-file\"\n",
    );
    let path = Some(file.0.as_path());
    let vars = [(ENV_JOBMANAGER, "10.2.2.2:9001")];

    let e = resolve(Some("10.3.3.3:9002"), path, &vars).unwrap();
    assert_eq!(e.url.as_str(), "http://10.3.3.3:9002");
    assert_eq!(e.source, EndpointSource::Flag);
    let e = resolve(None, path, &vars).unwrap();
    assert_eq!(e.url.as_str(), "http://10.2.2.2:9001");
    assert_eq!(e.source, EndpointSource::Env);
    let e = resolve(None, path, &[]).unwrap();
    assert_eq!(e.url.as_str(), "http://10.1.1.1:9000");
    assert_eq!(e.source, EndpointSource::Config(file.0.clone()));
    assert_eq!(e.token.as_deref(), Some("from-file"));
    let e = resolve(None, None, &[]).unwrap();
    assert_eq!(e.url.as_str(), "http://127.0.0.1:8081");
    assert_eq!(e.source, EndpointSource::Default);
    assert_eq!(e.token, None);
}

#[test]
fn flint_config_names_the_file_and_the_token_variable_wins_over_it() {
    let file = ConfigFile::new(
        "env-config",
        "[rest]\naddress = \"0.0.0.0\"\nport = 9100\ntoken = \"from-file\"\n",
    );
    let config = file.0.display().to_string();
    let e = resolve(
        None,
        None,
        &[(ENV_CONFIG, &config), (ENV_TOKEN, "from-env")],
    )
    .unwrap();
    // A JobManager listening on every address is reached on loopback.
    assert_eq!(e.url.as_str(), "http://127.0.0.1:9100");
    assert_eq!(e.token.as_deref(), Some("from-env"));
    assert!(e.source.to_string().contains(&config), "{}", e.source);
}

#[test]
fn rest_variables_count_as_configuration() {
    let endpoint = resolve(None, None, &[("FLINT_REST_PORT", "9999")]).expect("resolves");
    assert!(
        endpoint.url.to_string().contains(":9999"),
        "{}",
        endpoint.url
    );
    let err = resolve(None, None, &[("FLINT_REST_PORT", "http")]).unwrap_err();
    assert!(err.to_string().contains("rest.port"), "{err}");
    assert!(err.to_string().contains("FLINT_REST_PORT"), "{err}");
}

#[test]
fn a_bad_address_or_config_is_named() {
    let err = resolve(Some("jm"), None, &[]).unwrap_err();
    assert!(err.to_string().contains("--jobmanager `jm`"), "{err}");
    let err = resolve(None, None, &[(ENV_JOBMANAGER, "https://jm:1")]).unwrap_err();
    assert!(err.to_string().contains(ENV_JOBMANAGER), "{err}");

    let file = ConfigFile::new("bad", "[rest]\nprot = 1\n");
    let err = resolve(None, Some(&file.0), &[]).unwrap_err();
    assert!(matches!(err, EndpointError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("prot"), "{err}");
    let missing = std::env::temp_dir().join("flint-client-no-such-config.toml");
    let err = resolve(None, Some(&missing), &[]).unwrap_err();
    assert!(matches!(err, EndpointError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("no-such-config"), "{err}");
}

#[test]
fn only_a_file_with_high_availability_keys_has_a_leader_to_follow() {
    // Without HA keys there is no leader to find again, even with FLINT_JOBMANAGER set.
    let file = ConfigFile::new("no-ha", "[rest]\naddress = \"10.1.1.1\"\nport = 9000\n");
    let vars: BTreeMap<String, String> = [(ENV_JOBMANAGER.to_owned(), "10.2.2.2:1".to_owned())]
        .into_iter()
        .collect();
    let leader = Endpoint::leader(&file.0, |k| vars.get(k).cloned()).unwrap();
    assert_eq!(leader, None);
    // With them, the leader is asked of ZooKeeper (none answers on this port): the error
    // names the quorum, and FLINT_JOBMANAGER does not stand in for the leader.
    let file = ConfigFile::new(
        "ha",
        "[high-availability]\ntype = \"zookeeper\"\nzookeeper.quorum = \"127.0.0.1:1\"\n\
         zookeeper.client.connection-timeout = \"200ms\"\n\
         storageDir = \"/tmp/flint-endpoint-ha\"\n",
    );
    let error = Endpoint::leader(&file.0, |k| vars.get(k).cloned()).unwrap_err();
    assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
}
