//! zerosplit's control stack: it joins the datapath (steering, AF_XDP,
//! placement) and a transport into connections an application drives
//! through registered memory, posted work requests and a completion queue
//! ([`provider::Provider`]).
//!
//! One [`host::Host`] per interface queue owns what every transport
//! shares: the datapath, registered memory, the completion queue,
//! listeners and their accept queues, the ephemeral ports and the
//! interface's addresses ([`netinfo`] reads the kernel's tables). It
//! implements the provider API once and drives one of two engines through
//! the small [`host::Engine`] trait: the header-only TCP ([`engine::tcp`],
//! [`stack::Stack`]; inline or on a transport thread of its own) or
//! smoltcp, the full-packet baseline ([`engine::smol`], [`stack::SmolStack`]).
//! Imports point one way: [`host`] (with its [`host::HostConfig`] and
//! [`host::HostError`]) knows no engine, the engines know the host, and
//! the fronts ([`stack`]) open a host over one engine.
//! [`config`] loads and checks the configuration; [`shards`] runs one
//! stack per queue. On top of the provider: a `std::io` stream facade
//! ([`stream`]), moving one stream through a connection ([`transfer`]) and
//! the echo/discard/sink services ([`service`]). [`idle`] decides when a
//! loop stops spinning and sleeps (`threads.poll`).
//!
//! [`daemon`] serves one stack to many applications (`zerosplit daemon`);
//! [`attach`] is the provider library they use over it, through
//! [`ipc`]'s messages and shared-memory channel.
//!
//! This crate is a library only: the `zerosplit` binary lives in `cli/`,
//! the benchmark suite and its endpoint in `bench/`, so an application that
//! links the library compiles neither clap nor the bench harness.

pub mod attach;
pub mod capture;
pub mod config;
pub mod daemon;
pub mod engine;
pub mod host;
pub mod idle;
mod idmap;
mod in_order;
pub mod ipc;
pub mod metrics;
pub mod netinfo;
pub mod provider;
mod reserved_ports;
mod run_dir;
pub mod service;
pub mod shards;
pub mod stack;
pub mod stream;
pub mod tcp_info;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transfer;

pub use attach::{attach, AttachError, Attached};
