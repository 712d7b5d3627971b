//! zerosplit's control stack: it joins the datapath (steering, AF_XDP,
//! placement) and the header-only TCP into connections an application
//! drives through registered memory, posted work requests and a completion
//! queue ([`stack`]); reads what it needs from the kernel's tables
//! ([`netinfo`]); loads and checks its configuration ([`config`]). The same
//! provider API ([`provider::Provider`]) also runs over smoltcp ([`smol`]),
//! the full-packet baseline. On top of it: a `std::io` stream facade
//! ([`stream`]), moving one stream through a connection ([`transfer`]) and
//! the echo/discard/sink services ([`service`]).
//!
//! This crate is a library only: the `zerosplit` binary lives in `cli/`,
//! the benchmark suite and its endpoint in `bench/`, so an application that
//! links the library compiles neither clap nor the bench harness.

pub mod config;
pub mod host;
mod idle;
mod idmap;
mod in_order;
pub mod netinfo;
pub mod provider;
pub mod service;
pub mod shards;
pub mod smol;
pub mod stack;
pub mod stream;
pub mod tcp;
pub mod transfer;
