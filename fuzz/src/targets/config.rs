//! `config`: text through `zerosplit::config::Config::from_toml_str` —
//! random text, `config/reference.toml` with lines bent, and the reference
//! as a TOML tree with values swapped for arbitrary ones of any type
//! (numbers at the edges, size and duration strings that overflow, arrays,
//! tables, unknown keys).
//!
//! Invariants: loading returns `Ok` or an error, never panics; every error
//! past the syntax stage names a key; a loaded configuration converts to
//! every runtime configuration without panicking, its up-front tables can
//! be allocated, it is accepted by the TCP engine, and it survives a round
//! trip through `to_toml_string`.

use std::sync::OnceLock;

use arbitrary::{Result, Unstructured};
use transports::tcp::TcpConnection;
use transports::Instant;
use zerosplit::config::{Config, LoadError};

use super::Reached;

const REFERENCE: &str = include_str!("../../../config/reference.toml");

fn reference_tree() -> &'static toml::Table {
    static TREE: OnceLock<toml::Table> = OnceLock::new();
    TREE.get_or_init(|| REFERENCE.parse().unwrap_or_default())
}

pub(super) fn run(data: &[u8]) -> core::result::Result<Reached, String> {
    let mut u = Unstructured::new(data);
    let text = match text(&mut u) {
        Ok(t) => t,
        Err(_) => return Ok(Reached::SetupOnly),
    };
    check(&text).map(|()| Reached::Engine)
}

fn text(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => {
            let n = u.len();
            String::from_utf8_lossy(u.bytes(n)?).into_owned()
        }
        1 => bent_lines(u)?,
        _ => {
            let mut tree = reference_tree().clone();
            for _ in 0..u.int_in_range(1u8..=6)? {
                mutate_tree(u, &mut tree)?;
            }
            toml::to_string(&tree).unwrap_or_default()
        }
    })
}

/// The reference file with lines dropped, duplicated, or given new values.
fn bent_lines(u: &mut Unstructured<'_>) -> Result<String> {
    let mut lines: Vec<String> = REFERENCE.lines().map(str::to_string).collect();
    for _ in 0..u.int_in_range(1u8..=8)? {
        let i = u.choose_index(lines.len())?;
        match u.int_in_range(0u8..=3)? {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => {
                if let Some((key, _)) = lines[i].split_once('=') {
                    lines[i] = format!("{key}= {}", value(u, 0)?);
                }
            }
            _ => {
                let n = u.int_in_range(0usize..=16)?;
                let junk = String::from_utf8_lossy(u.bytes(n.min(u.len()))?).into_owned();
                lines[i].push_str(&junk);
            }
        }
    }
    Ok(lines.join("\n"))
}

/// Replaces a value somewhere in the tree (or adds a key) with an
/// arbitrary one.
fn mutate_tree(u: &mut Unstructured<'_>, table: &mut toml::Table) -> Result<()> {
    if table.is_empty() || u.ratio(1u8, 10u8)? {
        let key = (*u.choose(&["bogus", "name", "port", "kind", "mode", "queues"])?).to_string();
        table.insert(key, value(u, 0)?);
        return Ok(());
    }
    let i = u.choose_index(table.len())?;
    let Some((_, v)) = table.iter_mut().nth(i) else {
        return Ok(());
    };
    match v {
        toml::Value::Table(t) if u.ratio(3u8, 4u8)? => mutate_tree(u, t),
        toml::Value::Array(a) if !a.is_empty() && u.arbitrary()? => {
            let j = u.choose_index(a.len())?;
            if let toml::Value::Table(t) = &mut a[j] {
                mutate_tree(u, t)
            } else {
                a[j] = value(u, 0)?;
                Ok(())
            }
        }
        _ => {
            *v = value(u, 0)?;
            Ok(())
        }
    }
}

/// An arbitrary TOML value, biased to the edges that break conversions.
fn value(u: &mut Unstructured<'_>, depth: u8) -> Result<toml::Value> {
    use toml::Value as V;
    const INTS: [i64; 12] = [
        0,
        1,
        -1,
        2,
        63,
        64,
        65_535,
        65_536,
        4_294_967_295,
        4_294_967_296,
        i64::MAX,
        i64::MIN,
    ];
    const STRINGS: [&str; 22] = [
        "",
        "off",
        "on",
        "auto",
        "0",
        "0B",
        "1KiB",
        "64MiB",
        "16EiB",
        "18446744073709551615B",
        "99999999999999TiB",
        "0ms",
        "1ns",
        "-1s",
        "1e30s",
        "18446744073709551615s",
        "9999999h",
        "1-0",
        "0-65535",
        "65535-65536",
        "veth0",
        "any",
    ];
    Ok(match u.int_in_range(0u8..=7)? {
        0 => V::Integer(*u.choose(&INTS)?),
        1 => V::Integer(u.arbitrary()?),
        2 => V::Float(*u.choose(&[0.0, -1.0, 1e308, f64::NAN, f64::INFINITY, 0.5])?),
        3 => V::String((*u.choose(&STRINGS)?).to_string()),
        4 => {
            let n = u.int_in_range(0usize..=12)?;
            V::String(String::from_utf8_lossy(u.bytes(n.min(u.len()))?).into_owned())
        }
        5 => V::Boolean(u.arbitrary()?),
        6 if depth < 2 => {
            let n = u.int_in_range(0usize..=3)?;
            let mut a = Vec::new();
            for _ in 0..n {
                a.push(value(u, depth + 1)?);
            }
            V::Array(a)
        }
        _ if depth < 2 => {
            let mut t = toml::Table::new();
            t.insert("port".into(), value(u, depth + 1)?);
            V::Table(t)
        }
        _ => V::Integer(u.arbitrary()?),
    })
}

/// Loads `text` and checks what came back.
pub(crate) fn check(text: &str) -> core::result::Result<(), String> {
    match Config::from_toml_str(text) {
        Ok(config) => check_loaded(&config),
        Err(e @ (LoadError::Key { .. } | LoadError::Invalid { .. })) => {
            let keys = e.keys();
            if keys.is_empty() || keys.iter().any(|k| k.is_empty()) {
                Err(format!("error names no key: {e}"))
            } else {
                Ok(())
            }
        }
        Err(_) => Ok(()),
    }
}

/// Conversions of a loaded configuration.
fn check_loaded(config: &Config) -> core::result::Result<(), String> {
    for &q in &config.interface.queues {
        let _ = config.nic_config(q);
        let _ = config.stack_config(q);
        let _ = config.loop_core(q);
        let _ = config.smol_config(q);
    }
    // The tables a queue allocates up front: a value validation let
    // through must not make the allocation abort.
    let nic = config.nic_config(0);
    let _ = datapath::flow_table::FlowTable::new(nic.max_flows);
    let _ = datapath::mr::MrTable::new(0, nic.max_regions);
    let _ = datapath::ms::SegmentList::new(nic.max_recv_segments, datapath::mr::Access::RECV);
    let _ = datapath::ms::SegmentList::new(nic.max_send_segments, datapath::mr::Access::SEND);
    let _ = proto::placement::PlacedSet::new(nic.max_placed_ranges);
    let _ = config.cc_config();
    let _ = config.algorithm();
    let tcp = config.tcp_config();
    if let Err(e) = TcpConnection::connect(Instant::ZERO, tcp, 1, 2, 0) {
        return Err(format!(
            "a validated config is refused by the TCP engine: {e}"
        ));
    }
    let text = config
        .to_toml_string()
        .map_err(|e| format!("a loaded config does not serialize: {e}"))?;
    match Config::from_toml_str(&text) {
        Ok(again) if again == *config => Ok(()),
        Ok(_) => Err(format!("round trip changed the config:\n{text}")),
        Err(e) => Err(format!("round trip refused: {e}\n{text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_file_loads_and_survives_the_checks() {
        assert_eq!(check(REFERENCE), Ok(()));
        assert!(!reference_tree().is_empty());
    }
}
