//! What the daemon and an attached application share: the control
//! messages and their encoding ([`msg`]), the Unix socket they travel on
//! ([`sock`]), the channel in shared memory ([`channel`]) and the entries
//! of its rings ([`desc`]).

pub mod channel;
pub mod desc;
pub mod msg;
pub mod sock;
