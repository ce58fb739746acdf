//! Configuration: defaults, precedence (flags over PUNCTUAL_* over the file over defaults),
//! and validation errors that name the key.

use punctual::config::{Config, ConfigError, FileConfig, FsyncMode, ServeArgs, StoreChoice};
use std::process::Command;

fn file(text: &str) -> FileConfig {
    FileConfig::parse(text, "test.toml").expect("valid file")
}

fn err_text(r: Result<Config, ConfigError>) -> String {
    r.expect_err("should be refused").to_string()
}

#[test]
fn defaults_match_the_design() {
    let c = Config::resolve(FileConfig::default(), &ServeArgs::default()).expect("defaults");
    assert_eq!(c.listen.to_string(), "127.0.0.1:7480");
    assert_eq!(c.shards, punctual::engine::available_cores().len().max(1));
    assert_eq!(c.redis, None);
    assert_eq!(c.store, StoreChoice::Journal);
    assert_eq!(c.data_dir, std::path::PathBuf::from("./punctual-data"));
    assert_eq!(c.fsync, FsyncMode::Always);
    assert!(!c.journal_skip_corrupt);
    assert_eq!(c.max_body_bytes, 128 * 1024);
    assert_eq!(c.max_batch_body_bytes, 16 * 1024 * 1024);
    assert_eq!(c.bind_retry_ms, 5_000);
}

#[test]
fn flags_win_over_the_file() {
    let f = file("listen = \"127.0.0.1:9000\"\nspin_us = 5\nmax_connections = 7\n");
    let args = ServeArgs {
        listen: Some("127.0.0.1:9001".into()),
        ..Default::default()
    };
    let c = Config::resolve(f, &args).expect("valid");
    assert_eq!(c.listen.to_string(), "127.0.0.1:9001");
    assert_eq!((c.spin_us, c.max_connections), (5, 7));
}

#[test]
fn the_spin_window_is_fixed_unless_made_adaptive_by_the_file_or_a_flag() {
    let c = Config::resolve(FileConfig::default(), &ServeArgs::default()).expect("valid");
    assert!(!c.spin_adaptive);
    let c = Config::resolve(
        file("spin_adaptive = true\nspin_us = 300\n"),
        &ServeArgs::default(),
    )
    .expect("valid");
    assert_eq!((c.spin_adaptive, c.spin_us), (true, 300));
    let args = ServeArgs {
        spin_adaptive: Some("false".into()),
        ..Default::default()
    };
    let c = Config::resolve(file("spin_adaptive = true\n"), &args).expect("valid");
    assert!(!c.spin_adaptive, "the flag wins over the file");
    let e = err_text(Config::resolve(
        FileConfig::default(),
        &ServeArgs {
            spin_adaptive: Some("sometimes".into()),
            ..Default::default()
        },
    ));
    assert!(e.contains("`spin_adaptive`"), "{e}");
}

#[test]
fn errors_name_the_offending_key() {
    let bad = |args: ServeArgs| err_text(Config::resolve(FileConfig::default(), &args));
    let e = bad(ServeArgs {
        listen: Some("nowhere".into()),
        ..Default::default()
    });
    assert!(e.contains("`listen`"), "{e}");
    let e = bad(ServeArgs {
        shards: Some("0".into()),
        ..Default::default()
    });
    assert!(
        e.contains("`shards`") && e.contains("PUNCTUAL_SHARDS"),
        "{e}"
    );
    let e = bad(ServeArgs {
        spin_us: Some("-3".into()),
        ..Default::default()
    });
    assert!(e.contains("`spin_us`"), "{e}");
    let e = bad(ServeArgs {
        max_header_bytes: Some("100".into()),
        ..Default::default()
    });
    assert!(
        e.contains("`max_header_bytes`") && e.contains("8192"),
        "{e}"
    );
    let e = bad(ServeArgs {
        pinning: Some("sometimes".into()),
        ..Default::default()
    });
    assert!(e.contains("`pinning`"), "{e}");
    let e = bad(ServeArgs {
        cores: Some("0,x".into()),
        ..Default::default()
    });
    assert!(e.contains("`cores`"), "{e}");
    let e = bad(ServeArgs {
        redis: Some("http://localhost".into()),
        ..Default::default()
    });
    assert!(e.contains("`redis`"), "{e}");
}

#[test]
fn file_errors_name_the_key_and_unknown_keys_are_refused() {
    let e = FileConfig::parse("listne = \"x\"\n", "p.toml")
        .expect_err("unknown key")
        .to_string();
    assert!(e.contains("listne"), "{e}");
    let e = FileConfig::parse("spin_us = \"fast\"\n", "p.toml")
        .expect_err("wrong type")
        .to_string();
    assert!(e.contains("spin_us"), "{e}");
    let e = FileConfig::parse("[tenants.a]\ntokn = \"x\"\n", "p.toml")
        .expect_err("unknown")
        .to_string();
    assert!(e.contains("tokn"), "{e}");
    let e = err_text(Config::resolve(
        file("[tenants.\"a/b\"]\n"),
        &ServeArgs::default(),
    ));
    assert!(e.contains("tenants.a/b"), "{e}");
    let e = err_text(Config::resolve(
        file("[tenants.a]\nmax_pending = 0\n"),
        &ServeArgs::default(),
    ));
    assert!(e.contains("tenants.a.max_pending"), "{e}");
    for n in ["0", "1001"] {
        let e = err_text(Config::resolve(
            file(&format!(
                "[tenants.a]\nqueue = true\nqueue_max_receives = {n}\n"
            )),
            &ServeArgs::default(),
        ));
        assert!(e.contains("tenants.a.queue_max_receives"), "{e}");
    }
    let e = err_text(Config::resolve(
        file("[tenants.a]\ntoken = \"\"\n"),
        &ServeArgs::default(),
    ));
    assert!(e.contains("tenants.a.token"), "{e}");
}

#[test]
fn short_tokens_and_secrets_are_refused_with_their_key_and_never_echoed() {
    let short = "a-31-byte-secret-0123456789abcd";
    assert_eq!(short.len(), 31);
    for (text, key) in [
        (
            format!("[tenants.a]\ntoken = \"{short}\"\n"),
            "tenants.a.token",
        ),
        (
            format!("[tenants.a]\nwebhook_secret = \"{short}\"\n"),
            "tenants.a.webhook_secret",
        ),
        (format!("metrics_token = \"{short}\"\n"), "metrics_token"),
    ] {
        let e = err_text(Config::resolve(file(&text), &ServeArgs::default()));
        assert!(e.contains(key) && e.contains("at least 32"), "{e}");
        assert!(!e.contains(short), "the secret is not echoed: {e}");
    }
    let ok = format!("{short}x");
    let c = Config::resolve(
        file(&format!(
            "metrics_token = \"{ok}\"\n[tenants.a]\ntoken = \"{ok}\"\nwebhook_secret = \"{ok}\"\n"
        )),
        &ServeArgs::default(),
    )
    .expect("32 bytes are enough");
    assert_eq!(c.metrics_token.as_deref(), Some(ok.as_str()));
}

#[test]
fn tenants_are_closed_once_any_is_configured_unless_opened() {
    let none = Config::resolve(FileConfig::default(), &ServeArgs::default()).expect("valid");
    assert!(
        none.serves_unlisted_tenants(),
        "no table: the quick start is open"
    );
    let one = Config::resolve(file("[tenants.a]\n"), &ServeArgs::default()).expect("valid");
    assert!(!one.serves_unlisted_tenants());
    let opened = Config::resolve(
        file("open_tenants = true\n[tenants.a]\n"),
        &ServeArgs::default(),
    )
    .expect("valid");
    assert!(opened.serves_unlisted_tenants());
    let by_flag = Config::resolve(
        file("[tenants.a]\n"),
        &ServeArgs {
            open_tenants: Some("true".into()),
            ..Default::default()
        },
    )
    .expect("valid");
    assert!(by_flag.serves_unlisted_tenants());
}

#[test]
fn a_rate_limit_is_checked_at_start() {
    for (text, key) in [
        ("[tenants.a]\nburst = 5\n", "tenants.a.burst"),
        (
            "[tenants.a]\nmax_requests_per_s = 0\n",
            "tenants.a.max_requests_per_s",
        ),
        (
            "[tenants.a]\nmax_requests_per_s = 5\nburst = 0\n",
            "tenants.a.burst",
        ),
    ] {
        let e = err_text(Config::resolve(file(text), &ServeArgs::default()));
        assert!(e.contains(key), "{text}: {e}");
    }
    Config::resolve(
        file("[tenants.a]\nmax_requests_per_s = 100\nburst = 20\n"),
        &ServeArgs::default(),
    )
    .expect("valid");
}

#[test]
fn the_example_punctual_toml_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/punctual.toml");
    let f = FileConfig::load(std::path::Path::new(path)).expect("example parses");
    Config::resolve(f, &ServeArgs::default()).expect("example validates");
}

/// `--print-config` through the real binary, so clap's environment handling is included.
fn print_config(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
    cmd.arg("serve").args(args).arg("--print-config");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("PUNCTUAL_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn precedence_is_flag_then_env_then_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:1001\"\nspin_us = 11\nring_capacity = 1024\n[tenants.acme]\ntoken = \"hidden-0123456789abcdef0123456789ab\"\n").expect("write");
    let p = path.to_str().expect("utf-8");
    let env = [
        ("PUNCTUAL_LISTEN", "127.0.0.1:1002"),
        ("PUNCTUAL_SPIN_US", "22"),
    ];
    let (code, out, err) = print_config(&["--config", p, "--listen", "127.0.0.1:1003"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("listen = \"127.0.0.1:1003\""),
        "flag wins: {out}"
    );
    assert!(out.contains("spin_us = 22"), "env beats file: {out}");
    assert!(
        out.contains("ring_capacity = 1024"),
        "file beats default: {out}"
    );
    assert!(!out.contains("hidden"), "tokens are masked: {out}");
    let (code, _, err) = print_config(&[], &[("PUNCTUAL_SPIN_US", "lots")]);
    assert_eq!(code, 2);
    assert!(err.contains("spin_us"), "{err}");
}

#[test]
fn serve_help_documents_every_option() {
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["serve", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--config",
        "--listen",
        "--shards",
        "--cores",
        "--pinning",
        "--redis",
        "redis+cluster://",
        "--advertise",
        "--store",
        "--data-dir",
        "--fsync",
        "--journal-skip-corrupt",
        "PUNCTUAL_DATA_DIR",
        "--spin-us",
        "--ring-capacity",
        "--shard-capacity",
        "--max-connections",
        "--max-header-bytes",
        "--max-body-bytes",
        "--max-batch-body-bytes",
        "--idle-timeout-ms",
        "--body-timeout-ms",
        "--shutdown-timeout-ms",
        "--bind-retry-ms",
        "PUNCTUAL_LISTEN",
        "PUNCTUAL_BIND_RETRY_MS",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn bind_retry_ms_is_read_from_file_env_and_flag_and_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.toml");
    std::fs::write(&path, "bind_retry_ms = 100\n").expect("write");
    let p = path.to_str().expect("utf-8");
    let (code, out, err) = print_config(&["--config", p], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("bind_retry_ms = 100"), "file: {out}");
    let env = [("PUNCTUAL_BIND_RETRY_MS", "250")];
    let (_, out, _) = print_config(&["--config", p], &env);
    assert!(out.contains("bind_retry_ms = 250"), "env beats file: {out}");
    let (_, out, _) = print_config(&["--config", p, "--bind-retry-ms", "0"], &env);
    assert!(out.contains("bind_retry_ms = 0"), "flag beats env: {out}");
    let (code, _, err) = print_config(&["--bind-retry-ms", "600001"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`bind_retry_ms`") && err.contains("600000"),
        "{err}"
    );
}

#[test]
fn the_store_is_the_journal_unless_redis_or_memory_is_chosen() {
    let resolve = |args: ServeArgs, text: &str| Config::resolve(file(text), &args);
    let redis = ServeArgs {
        redis: Some("redis://127.0.0.1:6379/".into()),
        ..Default::default()
    };
    assert_eq!(
        resolve(redis.clone(), "").map(|c| c.store),
        Ok(StoreChoice::Redis)
    );
    let memory = ServeArgs {
        store: Some("memory".into()),
        ..Default::default()
    };
    assert_eq!(
        resolve(memory, "").map(|c| c.store),
        Ok(StoreChoice::Memory)
    );
    let c = resolve(
        ServeArgs::default(),
        "store = \"journal\"\ndata_dir = \"/var/lib/punctual\"\nfsync = \"never\"\njournal_skip_corrupt = true\n",
    )
    .expect("file");
    assert_eq!(
        (
            c.store,
            c.data_dir.to_string_lossy().into_owned(),
            c.fsync,
            c.journal_skip_corrupt
        ),
        (
            StoreChoice::Journal,
            "/var/lib/punctual".into(),
            FsyncMode::Never,
            true
        )
    );
    let both = ServeArgs {
        store: Some("journal".into()),
        ..redis
    };
    assert!(err_text(resolve(both, "")).contains("choose one store"));
    let everysec = ServeArgs {
        fsync: Some("everysec".into()),
        ..Default::default()
    };
    assert_eq!(
        resolve(everysec, "").map(|c| c.fsync),
        Ok(FsyncMode::EverySec)
    );
    let bad = ServeArgs {
        fsync: Some("sometimes".into()),
        ..Default::default()
    };
    assert!(err_text(resolve(bad, "")).contains("`fsync`"));
    let lone = ServeArgs {
        store: Some("redis".into()),
        ..Default::default()
    };
    assert!(err_text(resolve(lone, "")).contains("`store`"));
}

#[test]
fn sentinel_urls_and_wait_replicas_are_read_and_checked() {
    let resolve = |args: ServeArgs, text: &str| Config::resolve(file(text), &args);
    let c = resolve(
        ServeArgs::default(),
        "redis = \"redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/orders\"\nredis_wait_replicas = 1\n",
    )
    .expect("file");
    assert_eq!((c.store, c.redis_wait_replicas), (StoreChoice::Redis, 1));
    let flag = ServeArgs {
        redis: Some("redis+sentinel://127.0.0.1:26379/orders".into()),
        redis_wait_replicas: Some("2".into()),
        ..Default::default()
    };
    assert_eq!(resolve(flag, "").map(|c| c.redis_wait_replicas), Ok(2));
    for (url, why) in [
        ("redis+sentinel://127.0.0.1:26379", "master-name"),
        ("redis+sentinel://127.0.0.1/orders", "host:port"),
    ] {
        let bad = ServeArgs {
            redis: Some(url.into()),
            ..Default::default()
        };
        let e = err_text(resolve(bad, ""));
        assert!(e.contains("`redis`") && e.contains(why), "{url}: {e}");
    }
    let without_redis = ServeArgs {
        redis_wait_replicas: Some("1".into()),
        ..Default::default()
    };
    assert!(err_text(resolve(without_redis, "")).contains("`redis_wait_replicas`"));
    let too_many = ServeArgs {
        redis: Some("redis://127.0.0.1:6379/".into()),
        redis_wait_replicas: Some("65".into()),
        ..Default::default()
    };
    assert!(err_text(resolve(too_many, "")).contains("`redis_wait_replicas`"));
}

#[test]
fn cluster_urls_and_advertise_are_read_and_checked() {
    let resolve = |args: ServeArgs, text: &str| Config::resolve(file(text), &args);
    let c = resolve(
        ServeArgs::default(),
        "redis = \"redis+cluster://10.0.0.1:7000,10.0.0.2:7000,[::1]:7001/\"\nadvertise = \"10.0.0.5:7480\"\nredis_wait_replicas = 1\ncluster_secret = \"0123456789abcdef0123456789abcdef\"\n",
    )
    .expect("file");
    assert_eq!(
        (c.store, c.advertise.as_deref(), c.redis_wait_replicas),
        (StoreChoice::Redis, Some("10.0.0.5:7480"), 1)
    );
    let cluster = |redis: &str, advertise: Option<&str>| ServeArgs {
        redis: Some(redis.into()),
        advertise: advertise.map(Into::into),
        cluster_secret: Some("0123456789abcdef0123456789abcdef".into()),
        ..Default::default()
    };
    let ok = resolve(
        cluster("redis+cluster://h1:7000/", Some("node-1.local:7480")),
        "",
    );
    assert_eq!(
        ok.map(|c| c.advertise),
        Ok(Some("node-1.local:7480".into()))
    );
    assert_eq!(
        resolve(cluster("redis+cluster://h1:7000/", None), "").map(|c| c.advertise),
        Ok(None),
        "a single node needs no advertised address"
    );
    for (url, why) in [
        ("redis+cluster://h1:7000/0", "database 0"),
        ("redis+cluster://h1/", "host:port"),
        ("redis+cluster://h1:7000,/", "host:port"),
        ("redis+cluster://h 1:7000/", "host"),
        ("redis+cluster://h1:99999/", "1-65535"),
        ("redis+cluster://::1:7000/", "[addr]:port"),
    ] {
        let e = err_text(resolve(cluster(url, None), ""));
        assert!(e.contains("`redis`") && e.contains(why), "{url}: {e}");
    }
    for (redis, advertise, why) in [
        ("redis+cluster://h1:7000/", "10.0.0.5", "host:port"),
        ("redis+cluster://h1:7000/", "10.0.0.5:0", "1-65535"),
        ("redis+cluster://h1:7000/", "0.0.0.0:7480", "wildcard"),
        ("redis+cluster://h1:7000/", "[::]:7480", "wildcard"),
        ("redis+cluster://h1:7000/", "bad host:7480", "host"),
        ("redis://127.0.0.1:6379/", "10.0.0.5:7480", "Redis Cluster"),
    ] {
        let e = err_text(resolve(cluster(redis, Some(advertise)), ""));
        assert!(
            e.contains("`advertise`") && e.contains(why),
            "{advertise}: {e}"
        );
    }
    let alone = ServeArgs {
        advertise: Some("10.0.0.5:7480".into()),
        ..Default::default()
    };
    assert!(err_text(resolve(alone, "")).contains("Redis Cluster"));
    // A node among others proves the cluster's secret: none, or a short one, is refused.
    let no_secret = ServeArgs {
        cluster_secret: None,
        ..cluster("redis+cluster://h1:7000/", Some("10.0.0.5:7480"))
    };
    let e = err_text(resolve(no_secret, ""));
    assert!(
        e.contains("`cluster_secret`") && e.contains("required"),
        "{e}"
    );
    let short = ServeArgs {
        cluster_secret: Some("short".into()),
        ..cluster("redis+cluster://h1:7000/", Some("10.0.0.5:7480"))
    };
    let e = err_text(resolve(short, ""));
    assert!(
        e.contains("`cluster_secret`") && !e.contains("short"),
        "{e}"
    );
}

#[test]
fn print_config_masks_the_redis_password() {
    let (code, out, err) = print_config(
        &[
            "--redis",
            "redis+sentinel://app:hunter2@127.0.0.1:26379/orders/1",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(
        out.contains("redis+sentinel://app:***@127.0.0.1:26379/orders/1"),
        "{out}"
    );
}

#[test]
fn print_config_masks_the_cluster_secret() {
    let secret = "cluster-secret-never-printed-0123456789";
    let (code, out, err) = print_config(
        &[
            "--redis",
            "redis+cluster://127.0.0.1:7000/",
            "--advertise",
            "127.0.0.1:7480",
            "--cluster-secret",
            secret,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(secret), "{out}");
    assert!(out.contains("cluster_secret = \"***\""), "{out}");
}

#[test]
fn the_history_keys_default_to_a_day_and_ten_thousand_and_are_checked() {
    let c = Config::resolve(FileConfig::default(), &ServeArgs::default()).expect("defaults");
    assert_eq!(
        (c.history_retention_s, c.history_max_per_tenant),
        (86_400, 10_000)
    );
    let f = file("history_retention_s = 0\nhistory_max_per_tenant = 5\n");
    let c = Config::resolve(f, &ServeArgs::default()).expect("valid");
    assert_eq!((c.history_retention_s, c.history_max_per_tenant), (0, 5));
    for (text, key) in [
        ("history_retention_s = 2592001\n", "history_retention_s"),
        ("history_max_per_tenant = 0\n", "history_max_per_tenant"),
        (
            "history_max_per_tenant = 1000001\n",
            "history_max_per_tenant",
        ),
    ] {
        let e = err_text(Config::resolve(file(text), &ServeArgs::default()));
        assert!(e.contains(key), "{text}: {e}");
    }
}
