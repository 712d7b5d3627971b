//! `zerosplit impair`: a seeded impairment hop for kernels without netem.
//!
//! These kernels have no `sch_netem` (FACTS.md), and AF_XDP TX bypasses the
//! qdisc layer anyway, so loss, duplication, reordering, corruption, delay
//! and rate limits come from a forwarding hop in user space: a two-port
//! layer-2 bridge between two interfaces that applies an [`ImpairConfig`]
//! per direction, reproducibly for a given seed.
//!
//! - [`spec`]: [`ImpairConfig`] and its text form
//!   (`loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%,delay=50us,rate=2gbit,queue=256k,seed=7`);
//! - [`engine`]: the impairment without I/O ([`Impairer`]), on a caller's
//!   clock, with its [`ImpairCounters`];
//! - [`forwarder`]: two threads moving frames between two interfaces
//!   through `AF_PACKET` sockets ([`Forwarder`]);
//! - [`path`]: namespaces A — R — B with the forwarder in R
//!   ([`ImpairedPath`]), for tests.
//! - [`bottleneck`]: namespaces A — K — R — B with a tbf rate limit on
//!   the kernel-forwarded hop K and delay and loss from the forwarder in R
//!   ([`BottleneckPath`]), for the CC lab;
//! - [`flap`]: link flaps (`ip link set down/up` every few seconds,
//!   [`Flapper`], started with [`ImpairedPath::flap`]);
//! - [`frame`]: where a frame's payload starts.
//!
//! The engine's parts — the seeded generator, the rate limit's link clock
//! and the timed hold — are the simulator's (`transports::sim::{rng, Link,
//! ReleaseQueue}`): one impairment engine, driven here on the real clock
//! and there on a virtual one.
//!
//! # Using it
//!
//! In a test:
//!
//! ```no_run
//! use bench::impair::{ImpairConfig, ImpairedPath};
//! let cfg: ImpairConfig = "loss=1%,reorder=5%:200us,dup=0.5%,corrupt=0.1%".parse()?;
//! let path = ImpairedPath::create(1500, &cfg)?; // both directions
//! // … run endpoints in path.ns_a() / path.ns_b(), talk to path.b.addr …
//! println!("{}", path.counters().a_to_b);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! From a shell, between two interfaces of the current namespace that the
//! operator wired up (A's peer and B's peer, no addresses needed):
//!
//! ```text
//! zerosplit impair --a-if veth-ra --b-if veth-rb \
//!     --forward loss=1%,delay=50us,rate=2gbit --reverse delay=50us --duration 60
//! ```
//!
//! or with a lab built and removed for you: `zerosplit impair --lab
//! --forward SPEC`, which prints the namespaces, addresses and example
//! `ping`/`iperf3` commands. Both print per-direction counters at the end
//! (SIGINT/SIGTERM or `--duration`).
//!
//! # Limits
//!
//! - It forwards through `AF_PACKET` sockets with one copy in and one out
//!   per frame: ~1–1.7 Gbit/s of kernel TCP at MTU 1500 and ~2–4.5 Gbit/s
//!   at MTU 9000 on the loaded 2-vCPU test VM (a plain veth pair with the
//!   same offloads off: 1.4–4.6 Gbit/s there).
//! - The interfaces' offloads must be off (GRO on the hop's ends would
//!   hand it frames longer than the MTU, counted as `dropped_oversize`;
//!   TX checksum offload on the senders leaves checksums unfinished).
//! - Corruption only hits TCP/UDP payload bytes; an IPv4 UDP datagram
//!   with checksum 0 (no checksum) is delivered with the flipped bit.
//! - In the two-interface form the hop bridges *every* frame arriving on
//!   the two interfaces, also frames for the local host (which the local
//!   stack receives as well): give the interfaces no addresses.
//! - Memory: a direction holds at most 65 536 delayed frames and at most
//!   256 MiB of frame buffers (`max_frame` bytes each); arrivals beyond
//!   that count as `dropped_queue`. At MTU 1500 that is ~0.8 s of delay at
//!   1 Gbit/s.
//! - Timers: a held frame leaves within ~50 µs of its release time on an
//!   idle machine (it spins for the last 50 µs), later under CPU load.

pub mod bottleneck;
pub mod engine;
pub mod flap;
pub mod forwarder;
pub mod frame;
pub mod path;
pub mod spec;

pub use bottleneck::{BottleneckConfig, BottleneckPath, QueueCounters};
pub use engine::{ImpairCounters, Impairer};
pub use flap::{longest_stall_after_link_up, Flap, FlapConfig, Flapper};
pub use forwarder::{ForwardError, Forwarder, ForwarderConfig, PathCounters};
pub use path::{ImpairedPath, PathError};
pub use spec::{ImpairConfig, SpecError};
