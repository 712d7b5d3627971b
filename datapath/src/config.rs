//! The datapath's configuration types. They are defined next to the code
//! that applies them (the UMEM and socket layer in the crate-private
//! `sys` module) and published here, so a user configures the datapath
//! without reaching into the unsafe layer.

pub use crate::sys::umem::{MrSlots, SlotSet, UmemConfig, MAX_FRAME_SIZE, MIN_FRAME_SIZE};
pub use crate::xsk::{
    BindMode, BoundMode, BusyPoll, XskConfig, MAX_FRAGS, MAX_FRAME_COUNT, MAX_RING_SIZE,
};
