//! The `zerosplit` command line.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cmd;

/// zerosplit: a user-space TCP datapath over AF_XDP that writes payload
/// straight into application memory.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build two namespaces and a veth pair, move the same bytes Linux →
    /// Linux, Linux → zerosplit, zerosplit → Linux and zerosplit →
    /// zerosplit, check them byte-exact, print goodput side by side, clean
    /// up.
    Demo(cmd::demo::Args),
    /// Compare the transports on the same datapath: header-only tcp vs
    /// smoltcp, Linux -> zerosplit and zerosplit -> Linux on one fresh veth
    /// pair, each repeated; prints medians of goodput and of CPU per byte.
    CompareTransports(cmd::compare::Args),
    /// The hostile-packet suite: during a live Linux -> receiver transfer,
    /// an attacker on the path injects some fifty kinds of hostile frames
    /// (bad checksums and lengths, option lies, blind RST/SYN/data per RFC
    /// 5961, forged in-window data, SYN floods, ...) against zerosplit and
    /// against Linux; prints kind x (zerosplit, Linux) outcomes. --full for
    /// 8 MiB streams, 100 rounds and a 100 000-SYN flood.
    Hostile(cmd::hostile::Args),
    /// Congestion controllers through simulator scenarios (one flow alone,
    /// three staggered flows, two RTTs): the transport's own traces as CSV,
    /// SVG plots (cwnd, delivery rate, Jain over time, throughput vs
    /// delay), a summary table checked against stated bounds.
    CcLab(cmd::cc_lab::Args),
    /// Run the stack as a service with the configured listeners (echo,
    /// discard, sink) until SIGINT or SIGTERM, then detach cleanly.
    Run(cmd::run::Args),
    /// Serve the stack to many applications: own the interface (XDP
    /// program, queue, UMEM, transport) and let programs attach on a Unix
    /// socket (`zerosplit::attach`, `--daemon PATH`), each with its own
    /// memory, connections and limits, until SIGINT or SIGTERM.
    Daemon(cmd::daemon::Args),
    /// netcat over zerosplit: with -l accept one connection and write what
    /// arrives to stdout; without, connect, send stdin, FIN, and exit once
    /// everything is acknowledged.
    Nc(Box<cmd::nc::Args>),
    /// Per-queue and per-connection figures of a running stack (`run` or
    /// `nc` with [metrics] listen or --metrics), read from its metrics
    /// endpoint: state, bytes, goodput, cwnd, ssthresh, rtt, rto,
    /// retransmits, SACK holes, the controller and its phase, posted space;
    /// named as `ss -ti` names them.
    Stats(cmd::stats::Args),
    /// Run an unmodified program with its TCP sockets over zerosplit: the
    /// preload library takes the IPv4 TCP sockets that listen on the
    /// interface (or the wildcard) or connect out of it; everything else
    /// stays the kernel's. Example: zerosplit exec --iface veth0 -- iperf3 -s -4
    Exec(Box<cmd::exec::Args>),
    /// Measure RX rates on a fresh veth pair several times: raw AF_XDP
    /// receive vs the datapath (parse + verify + place). Prints medians.
    RxRate(cmd::rx_rate::Args),
    /// Impairment hop for kernels without netem: bridge frames between two
    /// interfaces, dropping, duplicating, reordering, corrupting, delaying
    /// and rate-limiting them as SPEC says, until SIGINT/SIGTERM or
    /// --duration; prints the counters at the end.
    ///
    /// SPEC: comma-separated loss=P, dup=P, reorder=P:DUR, corrupt=P,
    /// delay=DUR, rate=RATE, queue=SIZE, seed=N (P: 1% or 0.01; DUR: 50us,
    /// 2ms; RATE: 2gbit, 100mbit; SIZE: 256k), e.g.
    /// loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7
    ///
    /// With --lab, --flap EVERY:DOWN (e.g. 3s:500ms) takes the R-B wire
    /// down for DOWN every EVERY (link flaps).
    #[command(verbatim_doc_comment)]
    Impair(Box<cmd::impair::Args>),
    /// Benchmark on veth pairs this command builds itself: Linux vs
    /// zerosplit side by side (goodput, CPU per GB, retransmits, drops,
    /// ping-pong latency), against the raw AF_XDP and memcpy ceilings of
    /// the same run; table on stdout, optional JSON, SVG charts and a
    /// regression gate for CI.
    Bench(Box<cmd::bench::BenchArgs>),
    /// One endpoint of `zerosplit bench`, run in its own namespace
    /// (internal).
    #[command(hide = true)]
    BenchPeer(Box<bench::suite::endpoint::PeerArgs>),
}

/// Runs the command; an error is printed as its chain of causes on one
/// line (`Error: what: why`), never as a debug dump with a backtrace
/// (`RUST_BACKTRACE=1` is for panics, which are bugs; an error is the
/// user's to read).
fn main() -> std::process::ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    if !matches!(
        command,
        Command::Run(_) | Command::Daemon(_) | Command::Nc(_)
    ) {
        // run and nc take their level from their config file.
        cmd::init_logging(zerosplit::config::LogLevel::Warn);
    }
    match command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::CompareTransports(args) => cmd::compare::run(args),
        Command::Hostile(args) => cmd::hostile::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Daemon(args) => cmd::daemon::run(args),
        Command::CcLab(args) => cmd::cc_lab::run(args),
        Command::Nc(args) => cmd::nc::run(*args),
        Command::Stats(args) => cmd::stats::run(args),
        Command::Exec(args) => cmd::exec::run(*args),
        Command::RxRate(args) => cmd::rx_rate::run(args),
        Command::Impair(args) => cmd::impair::run(*args),
        Command::Bench(args) => cmd::bench::run(&args),
        Command::BenchPeer(args) => std::process::exit(bench::suite::endpoint::main(&args)),
    }
}
