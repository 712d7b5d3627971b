//! zerosplit's control stack: it joins the datapath (steering, AF_XDP,
//! placement) and the header-only TCP into connections an application
//! drives through registered memory, posted work requests and a completion
//! queue ([`stack`]); reads what it needs from the kernel's tables
//! ([`netinfo`]); loads and checks its configuration ([`config`]); and
//! implements the CLI's commands ([`nc`], [`demo`], [`compare`],
//! [`bench_cmd`] and its per-process endpoint [`bench_peer`]). The same
//! provider API ([`provider::Provider`]) also runs over smoltcp ([`smol`]),
//! the full-packet baseline.

pub mod bench_cmd;
pub mod bench_peer;
pub mod compare;
pub mod config;
pub mod demo;
mod engine;
mod idle;
mod idmap;
mod in_order;
pub mod nc;
pub mod netinfo;
pub mod provider;
pub mod service;
pub mod shards;
pub mod smol;
pub mod stack;
pub mod stream;
