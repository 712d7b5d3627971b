//! The two transports a [`Host`](crate::host::Host) drives through its
//! [`Engine`](crate::host::Engine) trait: the header-only TCP ([`tcp`]; the
//! TCP itself is `transports::tcp`, this is its driver over the host) and
//! smoltcp ([`smol`]). Engines import the host, never the other way; the
//! fronts that open a host over one of them are in [`crate::stack`].

pub mod smol;
pub mod tcp;
