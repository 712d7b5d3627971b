//! zerosplit's control stack: it joins the datapath (steering, AF_XDP,
//! placement) and the header-only TCP into connections an application
//! drives through registered memory, posted work requests and a completion
//! queue ([`stack`]); it reads what it needs from the kernel's tables
//! ([`netinfo`]).

pub mod demo;
pub mod nc;
pub mod netinfo;
pub mod stack;
