//! The configuration file: the shipped files load, reference.toml documents
//! exactly the keys the structs have, every error names its dotted key, and
//! the conversions produce the datapath's and the controller's settings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use datapath::config::{BindMode, BusyPoll, XskConfig};
use datapath::nic::{NicConfig, TxStrategy};
use datapath::steer::XdpMode;
use transports::cc::{Algorithm, CcConfig, CcParams, CubicParams, DctcpParams};
use zerosplit::config::{
    BusyPollConfig, Config, Congestion, Core, Dur, KeepaliveConfig, LoadError, PollMode, Service,
    Switch, ThreadMode, TransportKind,
};
use zerosplit::idle::PollConfig;

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config")
        .join(name)
}

/// Every leaf key of a TOML value as a dotted path (`umem.mtu`,
/// `listen[0].port`); arrays of scalars are leaves.
fn leaf_keys(prefix: &str, v: &toml::Value, out: &mut BTreeSet<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_keys(&p, v, out);
            }
        }
        toml::Value::Array(a) if a.iter().any(toml::Value::is_table) => {
            for (i, v) in a.iter().enumerate() {
                leaf_keys(&format!("{prefix}[{i}]"), v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

fn keys_of(v: &toml::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    leaf_keys("", v, &mut out);
    out
}

/// Loads `text`, expects an error, and checks that it names `key` both in
/// its message and in `keys()`.
fn expect_key_error(text: &str, key: &str) -> LoadError {
    let err = match Config::from_toml_str(text) {
        Ok(c) => panic!("expected an error about `{key}` for\n{text}\ngot {c:?}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(
        msg.contains(key),
        "message does not name `{key}`:\n{msg}\nfor\n{text}"
    );
    assert!(
        err.keys().contains(&key),
        "keys {:?} lack `{key}` for\n{text}",
        err.keys()
    );
    err
}

#[test]
fn default_toml_loads_to_the_defaults() {
    let c = Config::load(shipped("default.toml")).expect("config/default.toml loads");
    assert_eq!(c, Config::default());
    Config::default().validate().expect("defaults are valid");
}

#[test]
fn reference_toml_loads_to_the_defaults() {
    let c = Config::load(shipped("reference.toml")).expect("config/reference.toml loads");
    assert_eq!(c, Config::default());
}

#[test]
fn reference_toml_documents_exactly_the_struct_keys() {
    let text = std::fs::read_to_string(shipped("reference.toml")).unwrap();
    let documented: toml::Value = toml::from_str(&text).unwrap();
    let loaded = Config::from_toml_str(&text).unwrap();
    let back = toml::Value::try_from(&loaded).unwrap();
    let (doc_keys, struct_keys) = (keys_of(&documented), keys_of(&back));
    assert!(
        doc_keys.len() > 60,
        "suspiciously few keys: {}",
        doc_keys.len()
    );
    let missing: Vec<_> = struct_keys.difference(&doc_keys).collect();
    let extra: Vec<_> = doc_keys.difference(&struct_keys).collect();
    assert!(
        missing.is_empty(),
        "keys not in reference.toml: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "reference.toml keys the struct lacks: {extra:?}"
    );
    // And the values written back are the values read.
    assert_eq!(back, documented);
}

#[test]
fn every_reference_key_has_a_comment_above_it() {
    let text = std::fs::read_to_string(shipped("reference.toml")).unwrap();
    let mut previous = "";
    let mut keys = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') && !line.starts_with('[') {
            keys += 1;
            assert!(
                previous.starts_with('#'),
                "key line {line:?} has no comment right above it"
            );
            assert!(
                previous.contains("Default") || text_block_above_has_default(&text, line),
                "the comment of {line:?} does not give the default"
            );
        }
        previous = line;
    }
    assert!(keys > 60, "only {keys} key lines found");
}

/// Whether the comment block right above `key_line` mentions the default.
fn text_block_above_has_default(text: &str, key_line: &str) -> bool {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = lines.iter().position(|l| *l == key_line).unwrap();
    lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.starts_with('#'))
        .any(|l| l.contains("Default") || l.contains("default"))
}

#[test]
fn serialized_config_round_trips() {
    let mut c = Config::default();
    c.interface.busy_poll = Switch::On(BusyPollConfig {
        usecs: 50,
        budget: 64,
    });
    c.transport.keepalive = Switch::On(KeepaliveConfig {
        idle: Dur::from_secs(75),
        interval: Dur(Duration::from_micros(1500)),
        probes: 9,
    });
    c.transport.window_scale = Switch::Off;
    c.umem.mr_bytes = zerosplit::config::ByteSize(3 * 1000);
    let text = c.to_toml_string().unwrap();
    assert_eq!(Config::from_toml_str(&text).unwrap(), c, "{text}");
}

#[test]
fn alternative_spellings_load() {
    let c = Config::from_toml_str(
        r#"
        [interface]
        busy_poll = { usecs = 50, budget = 64 }
        tx_budget = "off"
        [umem]
        mr_bytes = 1048576
        [transport]
        congestion = "Reno"
        delayed_ack = false
        user_timeout = "1.5s"
        window_scale = "off"
        keepalive = { idle = "75s", interval = "200us", probes = 9 }
        [metrics]
        interval = "250ms"
        "#,
    )
    .unwrap();
    assert_eq!(
        c.interface.busy_poll,
        Switch::On(BusyPollConfig {
            usecs: 50,
            budget: 64
        })
    );
    assert_eq!(c.interface.tx_budget, Switch::Off);
    assert_eq!(c.umem.mr_bytes.bytes(), 1 << 20);
    assert_eq!(
        c.transport.congestion,
        Congestion::Algorithm(Algorithm::NewReno)
    );
    assert_eq!(c.transport.delayed_ack, Switch::Off);
    assert_eq!(
        c.transport.user_timeout.get().map(Dur::get),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(c.transport.window_scale, Switch::Off);
    let k = c.transport.keepalive.get().unwrap();
    assert_eq!(
        (k.idle.get(), k.interval.get(), k.probes),
        (Duration::from_secs(75), Duration::from_micros(200), 9)
    );
    assert_eq!(
        c.metrics.interval.get().map(Dur::get),
        Some(Duration::from_millis(250))
    );
    assert!(c.listen.len() == 1 && c.listen[0].service == Service::Echo);

    let cap = Config::from_toml_str("[capture]\npcap = \"/tmp/zs.pcap\"\nsnaplen = 128\n").unwrap();
    assert_eq!(
        (
            cap.capture.pcap.on().map(|p| p.display().to_string()),
            cap.capture.snaplen
        ),
        (Some("/tmp/zs.pcap".to_string()), 128)
    );

    let none = Config::from_toml_str("listen = []\n").unwrap();
    assert!(none.listen.is_empty());
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    for (text, key) in [
        ("bogus = 1\n", "bogus"),
        ("[umem]\nframe_sise = 4096\n", "umem.frame_sise"),
        (
            "[[listen]]\nport = 7\n[[listen]]\nprot = 9\n",
            "listen[1].prot",
        ),
        (
            "[interface]\nbusy_poll = { usecs = 5, budgte = 3 }\n",
            "interface.busy_poll.budgte",
        ),
        ("[transport]\ncwnd = 10\n", "transport.cwnd"),
        ("[metricz]\ninterval = \"1s\"\n", "metricz"),
    ] {
        let e = expect_key_error(text, key);
        assert!(matches!(e, LoadError::Key { .. }), "{e:?}");
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}

#[test]
fn bad_values_are_named_with_their_path() {
    for (text, key) in [
        ("[umem]\nframe_size = \"big\"\n", "umem.frame_size"),
        ("[umem]\nhugepages = 1\n", "umem.hugepages"),
        ("[interface]\nqueues = [0, -1]\n", "interface.queues[1]"),
        ("[interface]\nxdp_mode = \"driver\"\n", "interface.xdp_mode"),
        (
            "[interface]\nbind_mode = \"zerocopy\"\n",
            "interface.bind_mode",
        ),
        (
            "[transport]\ncongestion = \"no-such-cc\"\n",
            "transport.congestion",
        ),
        ("[transport]\nkind = \"quic\"\n", "transport.kind"),
        (
            "[threads]\ntransport_core = \"some\"\n",
            "threads.transport_core",
        ),
        ("[threads]\npoll = \"busy\"\n", "threads.poll"),
        ("[threads]\nidle_budget = 50\n", "threads.idle_budget"),
        (
            "[[listen]]\naddress = \"::1\"\nport = 7\n",
            "listen[0].address",
        ),
        ("[[listen]]\nport = 70000\n", "listen[0].port"),
        ("[[listen]]\nservice = \"echo\"\n", "listen[0].port"),
        (
            "[[listen]]\nport = 7\nservice = \"chargen\"\n",
            "listen[0].service",
        ),
        (
            "[ports]\nephemeral_range = \"40000-70000\"\n",
            "ports.ephemeral_range",
        ),
        ("[interface]\nbusy_poll = true\n", "interface.busy_poll"),
        (
            "[interface]\nbusy_poll = { usecs = 5 }\n",
            "interface.busy_poll.budget",
        ),
    ] {
        let e = expect_key_error(text, key);
        assert!(matches!(e, LoadError::Key { .. }), "{e:?}");
    }
}

#[test]
fn bad_duration_and_size_strings_are_named() {
    for (text, key, why) in [
        (
            "[transport]\nrto_min = \"5 parsecs\"\n",
            "transport.rto_min",
            "unknown unit",
        ),
        (
            "[transport]\nrto_max = \"60\"\n",
            "transport.rto_max",
            "no unit",
        ),
        (
            "[transport]\nrto_initial = 200\n",
            "transport.rto_initial",
            "duration",
        ),
        (
            "[transport]\ndelayed_ack = \"soon\"\n",
            "transport.delayed_ack",
            "off",
        ),
        (
            "[transport]\nkeepalive = { idle = \"1s\", interval = \"x\", probes = 3 }\n",
            "transport.keepalive.interval",
            "not a duration",
        ),
        (
            "[metrics]\ninterval = \"1.5ns\"\n",
            "metrics.interval",
            "whole number",
        ),
        (
            "[umem]\nmr_bytes = \"64 mb\"\n",
            "umem.mr_bytes",
            "unknown unit",
        ),
        ("[umem]\nmr_bytes = \"MiB\"\n", "umem.mr_bytes", "number"),
        ("[umem]\nmr_bytes = -5\n", "umem.mr_bytes", "negative"),
        (
            "[umem]\nmr_bytes = \"99999999TiB\"\n",
            "umem.mr_bytes",
            "too large",
        ),
    ] {
        let e = expect_key_error(text, key);
        assert!(e.to_string().contains(why), "{e} lacks {why:?}");
    }
}

#[test]
fn syntax_errors_say_where() {
    let e =
        Config::from_toml_str("[interface]\nname = \"veth0\"\n[umem\nmtu = 1500\n").unwrap_err();
    match &e {
        LoadError::Syntax { at, .. } => assert_eq!(at.line_column.map(|(l, _)| l), Some(3)),
        other => panic!("expected a syntax error, got {other:?}"),
    }
    assert!(e.to_string().contains("<string>:3:"), "{e}");
}

#[test]
fn key_errors_say_where_in_the_file() {
    let path =
        std::env::temp_dir().join(format!("zerosplit-config-test-{}.toml", std::process::id()));
    std::fs::write(&path, "[umem]\nmtu = 1500\nframe_size = \"x\"\n").unwrap();
    let e = Config::load(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}:3:", path.display())), "{msg}");
    assert!(msg.contains("umem.frame_size"), "{msg}");
}

#[test]
fn rule_violations_point_at_the_line_when_the_key_is_written() {
    let e = Config::from_toml_str("[umem]\nmtu = 1000\nframe_size = 3000\n").unwrap_err();
    let LoadError::Invalid { source, .. } = &e else {
        panic!("expected a rule violation, got {e:?}");
    };
    let line_of = |key: &str| {
        source
            .problems
            .iter()
            .find(|p| p.key == key)
            .unwrap_or_else(|| panic!("no problem about {key}: {e}"))
            .line_column
    };
    assert_eq!(line_of("umem.frame_size"), Some((3, 14)));
    // mss is left at its default (1460), too large for MTU 1000: not in the text.
    assert_eq!(line_of("transport.mss"), None);
    assert!(
        e.to_string()
            .contains("umem.frame_size (line 3, column 14)"),
        "{e}"
    );
}

#[test]
fn a_missing_file_is_a_read_error_naming_it() {
    let e = Config::load("/nonexistent/zerosplit.toml").unwrap_err();
    assert!(matches!(e, LoadError::Read { .. }), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/zerosplit.toml"), "{e}");
}

#[test]
fn impossible_combinations_are_named() {
    for (text, key) in [
        ("[umem]\nframe_size = 3000\n", "umem.frame_size"),
        ("[umem]\nframe_size = 8192\n", "umem.frame_size"),
        ("[umem]\nframe_size = 1024\nmtu = 1000\n", "umem.frame_size"),
        ("[umem]\nmtu = 9000\n", "umem.mtu"),
        ("[umem]\nmtu = 100\n", "umem.mtu"),
        ("[umem]\nmulti_buffer = true\nframe_size = 2048\nmtu = 65535\n", "umem.mtu"),
        ("[umem]\ntx_strategy = \"chain\"\n", "umem.tx_strategy"),
        ("[umem]\nrx_ring = 1000\n", "umem.rx_ring"),
        ("[umem]\ncomp_ring = 0\n", "umem.comp_ring"),
        ("[umem]\nflow_rx_ring = 8192\n", "umem.flow_rx_ring"),
        ("[umem]\ntx_frames = 8192\n", "umem.tx_frames"),
        ("[umem]\ntx_frames = 0\n", "umem.tx_frames"),
        ("[umem]\nframe_count = 1\ntx_frames = 1\n", "umem.frame_count"),
        ("[umem]\nmr_bytes = 0\n", "umem.mr_bytes"),
        ("[interface]\nqueues = [0, 0]\n", "interface.queues[1]"),
        ("[interface]\nqueues = [64]\n", "interface.queues[0]"),
        ("[interface]\nqueues = []\n", "interface.queues"),
        ("[interface]\nname = \"\"\n", "interface.name"),
        ("[interface]\nname = \"a-very-long-interface\"\n", "interface.name"),
        ("[interface]\nname = \"eth/0\"\n", "interface.name"),
        ("[interface]\nbusy_poll = { usecs = 50, budget = 0 }\n", "interface.busy_poll.budget"),
        ("[interface]\nbusy_poll = { usecs = 0, budget = 8 }\n", "interface.busy_poll.usecs"),
        ("[interface]\ntx_budget = 0\n", "interface.tx_budget"),
        ("[flows]\nmax_flows = 0\n", "flows.max_flows"),
        // Found by the `config` fuzz target: huge capacities passed
        // validation and made the datapath's up-front allocation abort.
        ("[flows]\nmax_flows = 99999999999\n", "flows.max_flows"),
        ("[flows]\nmax_flows = 65537\n", "flows.max_flows"),
        ("[flows]\nmax_recv_segments = 99999999999\n", "flows.max_recv_segments"),
        ("[flows]\nmax_send_segments = 65537\n", "flows.max_send_segments"),
        ("[flows]\nmax_placed_ranges = 4294967296\n", "flows.max_placed_ranges"),
        ("[flows]\nmax_regions = 99999999999\n", "flows.max_regions"),
        ("[flows]\nflow_rx_budget = 0\n", "flows.flow_rx_budget"),
        ("[flows]\nrx_coalesce_bytes = 1048577\n", "flows.rx_coalesce_bytes"),
        ("[flows]\nmax_flow_sockets = 961\n", "flows.max_flow_sockets"),
        (
            "[[listen]]\nport = 7\n[[listen]]\nport = 7\nservice = \"sink\"\n",
            "listen[1].port",
        ),
        (
            "[[listen]]\naddress = \"198.18.0.1\"\nport = 9\n[[listen]]\nport = 9\n",
            "listen[1].port",
        ),
        ("[[listen]]\nport = 0\n", "listen[0].port"),
        ("[[listen]]\naddress = \"224.0.0.1\"\nport = 7\n", "listen[0].address"),
        ("[ports]\nephemeral_range = \"5000-4000\"\n", "ports.ephemeral_range"),
        ("[ports]\nephemeral_range = \"80-2000\"\n", "ports.ephemeral_range"),
        (
            "[ports]\nephemeral_range = \"40000-40999\"\n[[listen]]\nport = 40500\n",
            "ports.ephemeral_range",
        ),
        ("[transport]\ncongestion = \"none\"\n", "transport.congestion"),
        ("[transport]\nrto_min = \"300ms\"\n", "transport.rto_min"),
        ("[transport]\nrto_min = \"0s\"\ndelayed_ack = \"off\"\n", "transport.rto_min"),
        ("[transport]\nrto_initial = \"2min\"\n", "transport.rto_initial"),
        ("[transport]\nmss = 1461\n", "transport.mss"),
        ("[transport]\nmss = 10\n", "transport.mss"),
        ("[transport]\ndelayed_ack = \"10ms\"\n", "transport.delayed_ack"),
        ("[transport]\ndelayed_ack = \"0s\"\n", "transport.delayed_ack"),
        ("[transport]\nwindow_scale = 15\n", "transport.window_scale"),
        (
            "[transport]\nkeepalive = { idle = \"1s\", interval = \"1s\", probes = 0 }\n",
            "transport.keepalive.probes",
        ),
        (
            "[transport]\nkeepalive = { idle = \"0s\", interval = \"1s\", probes = 3 }\n",
            "transport.keepalive.idle",
        ),
        ("[transport]\ncubic_beta = 1.0\n", "transport.cubic_beta"),
        ("[transport]\ncubic_c = -0.4\n", "transport.cubic_c"),
        ("[transport]\ndctcp_gain = 0.0\n", "transport.dctcp_gain"),
        ("[transport]\npacing_gain = 0.0\n", "transport.pacing_gain"),
        ("[transport]\ntso_segments = 0\n", "transport.tso_segments"),
        ("[transport]\ntso_segments = 65\n", "transport.tso_segments"),
        ("[transport]\nmax_retransmissions = 0\n", "transport.max_retransmissions"),
        (
            "[transport]\nminimum_window_segments = 11\n",
            "transport.minimum_window_segments",
        ),
        ("[transport]\ninitial_window_segments = 0\nminimum_window_segments = 0\n", "transport.initial_window_segments"),
        ("[transport]\nuser_timeout = \"0s\"\n", "transport.user_timeout"),
        ("[threads]\ntransport_core = 0\n", "threads.transport_core"),
        ("[threads]\ndatapath_cores = [0, 0]\n", "threads.datapath_cores"),
        ("[threads]\ndatapath_cores = [100000]\n", "threads.datapath_cores[0]"),
        ("[threads]\nmode = \"dedicated\"\ntransport_core = 0\n", "threads.datapath_cores"),
        ("[threads]\nmode = \"dedicated\"\ndatapath_cores = [0]\n", "threads.transport_core"),
        (
            "[threads]\nmode = \"dedicated\"\ndatapath_cores = [0]\ntransport_core = 0\n",
            "threads.transport_core",
        ),
        (
            "[interface]\nqueues = [0, 1]\n[threads]\nmode = \"dedicated\"\ndatapath_cores = [0, 0]\ntransport_core = 0\n",
            "threads.datapath_cores[1]",
        ),
        (
            "[threads]\nmode = \"dedicated\"\ndatapath_cores = [0]\ntransport_core = 100000\n",
            "threads.transport_core",
        ),
        ("[capture]\nsnaplen = 10\n", "capture.snaplen"),
        (
            "[interface]\nqueues = [0, 1]\n[threads]\ndatapath_cores = [0]\n",
            "threads.datapath_cores",
        ),
        ("[threads]\nspsc_capacity = 1\n", "threads.spsc_capacity"),
        ("[threads]\nidle_budget = \"0us\"\n", "threads.idle_budget"),
        ("[threads]\nidle_budget = \"101ms\"\n", "threads.idle_budget"),
        ("[metrics]\ninterval = \"1ms\"\n", "metrics.interval"),
    ] {
        let e = expect_key_error(text, key);
        assert!(matches!(e, LoadError::Invalid { .. }), "{e:?}");
    }
}

#[test]
fn possible_neighbours_of_those_combinations_load() {
    // The same keys on the right side of each rule.
    for text in [
        "[umem]\nframe_size = 2048\nmtu = 2034\n",
        "[umem]\nmulti_buffer = true\nmtu = 9000\n[transport]\nmss = 8960\n",
        "[umem]\nmulti_buffer = true\ntx_strategy = \"chain\"\n",
        "[umem]\ntx_frames = 4095\n",
        "[interface]\nqueues = [0, 63]\n",
        "[[listen]]\naddress = \"198.18.0.1\"\nport = 9\n[[listen]]\naddress = \"198.18.0.2\"\nport = 9\n",
        "[ports]\nephemeral_range = \"1024-1024\"\n",
        "[transport]\nrto_min = \"200ms\"\nrto_initial = \"200ms\"\nrto_max = \"200ms\"\ndelayed_ack = \"40ms\"\n",
        "[transport]\ndelayed_ack = \"4999us\"\n",
        "[transport]\nwindow_scale = 14\n",
        "[threads]\ndatapath_cores = [0]\n",
        "[threads]\nidle_budget = \"1us\"\n",
        "[threads]\npoll = \"sleep\"\nidle_budget = \"100ms\"\n",
        "[metrics]\ninterval = \"10ms\"\n",
    ] {
        if let Err(e) = Config::from_toml_str(text) {
            panic!("{text}\nshould load: {e}");
        }
    }
}

#[test]
fn each_queue_gets_the_core_at_its_position() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        // Core 1 does not exist here; the position mapping needs two.
        expect_key_error(
            "[interface]\nqueues = [3, 5]\n[threads]\ndatapath_cores = [1, 0]\n",
            "threads.datapath_cores[0]",
        );
        return;
    }
    let rtc =
        Config::from_toml_str("[interface]\nqueues = [3, 5]\n[threads]\ndatapath_cores = [1, 0]\n")
            .expect("loads");
    assert_eq!(
        (rtc.loop_core(3), rtc.loop_core(5), rtc.loop_core(4)),
        (Some(1), Some(0), None)
    );
    let unpinned = Config::from_toml_str("[interface]\nqueues = [3, 5]\n").expect("loads");
    assert_eq!(unpinned.loop_core(3), None);
}

#[test]
fn dedicated_mode_with_distinct_online_cores_loads() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let text = "[threads]\nmode = \"dedicated\"\ndatapath_cores = [0]\ntransport_core = 1\n";
    let result = Config::from_toml_str(text);
    if n >= 2 {
        let c = result.unwrap();
        assert_eq!(c.threads.mode, ThreadMode::Dedicated);
        assert_eq!(c.threads.transport_core, Core::Id(1));
    } else {
        // One CPU: core 1 does not exist, and the error says so.
        expect_key_error(text, "threads.transport_core");
    }
}

#[test]
fn smoltcp_accepts_only_its_controllers() {
    for &a in Algorithm::ALL {
        let text = format!(
            "[transport]\nkind = \"smoltcp\"\ncongestion = \"{}\"\necn = true\n",
            a.name()
        );
        let ok = matches!(a.name(), "newreno" | "cubic");
        match Config::from_toml_str(&text) {
            Ok(c) => {
                assert!(ok, "smoltcp accepted {a}");
                assert_eq!(c.transport.kind, TransportKind::Smoltcp);
            }
            Err(e) => {
                assert!(!ok, "smoltcp refused {a}: {e}");
                assert!(e.keys().contains(&"transport.congestion"), "{e}");
            }
        }
    }
    let c =
        Config::from_toml_str("[transport]\nkind = \"smoltcp\"\ncongestion = \"none\"\n").unwrap();
    assert_eq!(c.transport.congestion, Congestion::None);
    assert_eq!(c.algorithm(), None);
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = Config::from_toml_str(
        "[umem]\nframe_size = 3000\nrx_ring = 1000\n[transport]\nwindow_scale = 20\n",
    )
    .unwrap_err();
    let keys = e.keys();
    for k in ["umem.frame_size", "umem.rx_ring", "transport.window_scale"] {
        assert!(keys.contains(&k), "{keys:?} lacks {k}");
    }
}

#[test]
fn interface_override_is_validated() {
    let mut c = Config::default();
    c.set_interface("zs1234x5a").unwrap();
    assert_eq!(c.interface.name, "zs1234x5a");
    let e = c.set_interface("name-longer-than-15").unwrap_err();
    assert!(e.has_key("interface.name"), "{e}");
}

#[test]
fn default_nic_config_matches_the_datapath_defaults() {
    let n = Config::default().nic_config(0);
    let d = NicConfig::default();
    assert_eq!(n.xsk, XskConfig::default());
    assert_eq!(n.xdp_mode, d.xdp_mode);
    assert_eq!(n.queue, 0);
    assert_eq!(
        (
            n.max_flows,
            n.max_regions,
            n.max_recv_segments,
            n.max_send_segments,
            n.max_placed_ranges
        ),
        (
            d.max_flows,
            d.max_regions,
            d.max_recv_segments,
            d.max_send_segments,
            d.max_placed_ranges
        )
    );
    assert_eq!(n.flow_sockets, d.flow_sockets);
    assert_eq!(n.tx_strategy, d.tx_strategy);
    assert_eq!(n.mtu, d.mtu);
    assert_eq!(n.flow_rx_budget, d.flow_rx_budget);
    assert_eq!(n.rx_coalesce_bytes, d.rx_coalesce_bytes);
    assert_eq!(n.max_flow_sockets, d.max_flow_sockets);
}

#[test]
fn nic_config_maps_every_field() {
    let c = Config::from_toml_str(
        r#"
        [interface]
        queues = [2, 3]
        xdp_mode = "generic"
        bind_mode = "zero-copy"
        need_wakeup = false
        busy_poll = { usecs = 20, budget = 16 }
        tx_budget = "off"
        [umem]
        frame_size = 2048
        frame_count = 8192
        tx_frames = 2048
        mr_bytes = "1GiB"
        hugepages = true
        multi_buffer = true
        rx_ring = 4096
        tx_ring = 1024
        fill_ring = 8192
        comp_ring = 512
        flow_rx_ring = 64
        tx_strategy = "chain"
        mtu = 9000
        [flows]
        max_flows = 10
        per_flow_sockets = false
        max_recv_segments = 11
        max_send_segments = 12
        max_placed_ranges = 13
        max_regions = 14
        flow_rx_budget = 15
        rx_coalesce_bytes = 0
        max_flow_sockets = 9
        [transport]
        mss = 8960
        "#,
    )
    .unwrap();
    let n = c.nic_config(3);
    assert_eq!(n.queue, 3);
    assert_eq!(n.xdp_mode, XdpMode::Generic);
    let x = &n.xsk;
    assert_eq!(x.bind, BindMode::ZeroCopy);
    assert!(!x.need_wakeup && x.multi_buffer);
    assert_eq!(
        x.busy_poll,
        Some(BusyPoll {
            usecs: 20,
            budget: 16
        })
    );
    assert_eq!(x.tx_budget, None);
    assert_eq!(
        (
            x.umem.frame_size,
            x.umem.frame_count,
            x.umem.mr_bytes,
            x.umem.hugepages
        ),
        (2048, 8192, 1 << 30, true)
    );
    assert_eq!(x.tx_frames, 2048);
    assert_eq!(
        (
            x.rx_ring,
            x.tx_ring,
            x.fill_ring,
            x.comp_ring,
            x.flow_rx_ring
        ),
        (4096, 1024, 8192, 512, 64)
    );
    assert_eq!(n.tx_strategy, Some(TxStrategy::Chain));
    assert_eq!(n.mtu, 9000);
    assert_eq!(
        (
            n.max_flows,
            n.max_recv_segments,
            n.max_send_segments,
            n.max_placed_ranges,
            n.max_regions
        ),
        (10, 11, 12, 13, 14)
    );
    assert!(!n.flow_sockets);
    assert_eq!(n.flow_rx_budget, 15);
    assert_eq!(n.rx_coalesce_bytes, 0, "0 turns software GRO off");
    assert_eq!(n.max_flow_sockets, 9);

    let copy = Config::from_toml_str(
        "[umem]\ntx_strategy = \"copy\"\n[interface]\nbind_mode = \"copy\"\n",
    )
    .unwrap();
    assert_eq!(copy.nic_config(0).tx_strategy, Some(TxStrategy::Copy));
    assert_eq!(copy.nic_config(0).xsk.bind, BindMode::Copy);
}

#[test]
fn cc_config_maps_every_field() {
    assert_eq!(Config::default().cc_config(), CcConfig::default());
    let c = Config::from_toml_str(
        "[transport]\nmss = 1000\ninitial_window_segments = 4\nminimum_window_segments = 1\n\
         dctcp_gain = 0.5\ncubic_c = 0.8\ncubic_beta = 0.5\nhystart = false\n",
    )
    .unwrap();
    assert_eq!(
        c.cc_config(),
        CcConfig {
            mss: 1000,
            initial_window_segments: 4,
            minimum_window_segments: 1,
            params: CcParams {
                dctcp: DctcpParams { gain: 0.5 },
                cubic: CubicParams {
                    c: 0.8,
                    beta: 0.5,
                    hystart: false,
                },
                ..CcParams::default()
            },
        }
    );
    assert_eq!(c.algorithm(), Some(Algorithm::NewReno));
}

#[test]
fn each_controller_reads_its_own_table() {
    let c = Config::from_toml_str(
        "[transport]\ncongestion = \"cubic\"\n\
         [transport.cc.cubic]\nbeta = 0.5\nc = 0.8\nhystart = false\n\
         [transport.cc.dctcp]\ngain = 0.25\n[transport.cc.newreno]\n[transport.cc.bbr]\n",
    )
    .unwrap();
    let params = c.cc_config().params;
    assert_eq!(
        params.cubic,
        CubicParams {
            beta: 0.5,
            c: 0.8,
            hystart: false
        }
    );
    assert_eq!(params.dctcp, DctcpParams { gain: 0.25 });
    // The new tables round-trip, and the old keys are not written back.
    let text = c.to_toml_string().unwrap();
    assert!(text.contains("[transport.cc.cubic]"), "{text}");
    assert!(!text.contains("cubic_beta"), "{text}");
    assert_eq!(Config::from_toml_str(&text).unwrap(), c);
}

#[test]
fn bad_controller_parameters_are_named_by_their_dotted_key() {
    for (text, key) in [
        (
            "[transport.cc.cubic]\nbeta = 1.0\n",
            "transport.cc.cubic.beta",
        ),
        ("[transport.cc.cubic]\nc = -0.4\n", "transport.cc.cubic.c"),
        (
            "[transport.cc.dctcp]\ngain = 0.0\n",
            "transport.cc.dctcp.gain",
        ),
        (
            "[transport.cc.dctcp]\ngain = 2.0\n",
            "transport.cc.dctcp.gain",
        ),
        (
            "[transport.cc.cubic]\nbeta = \"high\"\n",
            "transport.cc.cubic.beta",
        ),
        (
            "[transport.cc.cubic]\ngamma = 1\n",
            "transport.cc.cubic.gamma",
        ),
        (
            "[transport.cc.no_such_cc]\nalpha = 1\n",
            "transport.cc.no_such_cc",
        ),
        (
            "[transport.cc.vegas]\nbeta = 1\n",
            "transport.cc.vegas.beta",
        ),
        (
            "[transport]\ncubic_beta = 0.5\n[transport.cc.cubic]\nbeta = 0.6\n",
            "transport.cubic_beta",
        ),
    ] {
        expect_key_error(text, key);
    }
    let e = expect_key_error(
        "[transport.cc.cubic]\nbeta = 1.5\n",
        "transport.cc.cubic.beta",
    );
    assert!(e.to_string().contains("(0, 1)"), "{e}");
}

/// Every key that sizes memory or a queue has an upper bound: the largest
/// value TOML can write (or `u32::MAX` for the 32-bit keys) is refused with
/// an error naming the key, the value and the bound, and nothing is
/// allocated on the way (no abort on `with_capacity`).
#[test]
fn huge_sizes_are_refused_by_name_with_their_bound() {
    let huge_usize = i64::MAX.to_string();
    let huge_u32 = u32::MAX.to_string();
    let cases = [
        ("flows", "max_flows", &huge_usize, datapath::nic::MAX_FLOWS),
        (
            "flows",
            "max_recv_segments",
            &huge_usize,
            datapath::nic::MAX_SEGMENTS,
        ),
        (
            "flows",
            "max_send_segments",
            &huge_usize,
            datapath::nic::MAX_SEGMENTS,
        ),
        (
            "flows",
            "max_placed_ranges",
            &huge_usize,
            datapath::nic::MAX_PLACED_RANGES,
        ),
        (
            "flows",
            "max_regions",
            &huge_usize,
            datapath::nic::MAX_REGIONS,
        ),
        (
            "umem",
            "frame_count",
            &huge_u32,
            datapath::config::MAX_FRAME_COUNT as usize,
        ),
        (
            "umem",
            "rx_ring",
            &huge_u32,
            datapath::config::MAX_RING_SIZE as usize,
        ),
        (
            "umem",
            "tx_ring",
            &huge_u32,
            datapath::config::MAX_RING_SIZE as usize,
        ),
        (
            "umem",
            "fill_ring",
            &huge_u32,
            datapath::config::MAX_RING_SIZE as usize,
        ),
        (
            "umem",
            "comp_ring",
            &huge_u32,
            datapath::config::MAX_RING_SIZE as usize,
        ),
        (
            "umem",
            "flow_rx_ring",
            &huge_u32,
            datapath::config::MAX_RING_SIZE as usize,
        ),
        ("threads", "spsc_capacity", &huge_usize, 1 << 24),
    ];
    for (section, key, value, bound) in cases {
        let text = format!("[{section}]\n{key} = {value}\n");
        let e = expect_key_error(&text, &format!("{section}.{key}"));
        let msg = e.to_string();
        assert!(msg.contains(value.as_str()), "value missing: {msg}");
        assert!(msg.contains(&bound.to_string()), "bound missing: {msg}");
    }
    // Values TOML cannot write reach the same rule through the struct.
    let mut c = Config::default();
    c.flows.max_flows = usize::MAX;
    c.flows.max_placed_ranges = usize::MAX;
    let e = c.validate().unwrap_err();
    assert!(
        e.has_key("flows.max_flows") && e.has_key("flows.max_placed_ranges"),
        "{e}"
    );
    // The datapath refuses the same sizes itself, before allocating.
    let e = c.nic_config(0).validate().unwrap_err().to_string();
    assert!(
        e.contains("max_flows") && e.contains(&usize::MAX.to_string()),
        "{e}"
    );
    // The bounds themselves load.
    let text = format!(
        "[flows]\nmax_flows = {}\nmax_placed_ranges = {}\n",
        datapath::nic::MAX_FLOWS,
        datapath::nic::MAX_PLACED_RANGES
    );
    Config::from_toml_str(&text).expect("values at the bounds load");
}

#[test]
fn poll_mode_and_idle_budget_reach_the_stack() {
    let c = Config::default();
    assert_eq!(c.threads.poll, PollMode::Adaptive);
    assert_eq!(c.stack_config(0).poll, PollConfig::default());
    for (name, mode) in [
        ("spin", PollMode::Spin),
        ("adaptive", PollMode::Adaptive),
        ("sleep", PollMode::Sleep),
    ] {
        let text = format!("[threads]\npoll = \"{name}\"\nidle_budget = \"200us\"\n");
        let c = Config::from_toml_str(&text).expect("valid poll settings");
        let poll = c.stack_config(0).poll;
        assert_eq!(poll.mode, mode);
        assert_eq!(poll.idle_budget, Duration::from_micros(200));
    }
}
