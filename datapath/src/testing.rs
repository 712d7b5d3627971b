//! The datapath without a kernel, for tests (feature `testing`): a
//! [`Nic`] over in-memory rings and steering tables, with the kernel's
//! side of every ring in the test's hands. No socket, no XDP program, no
//! root; the poll loop, tables, placement and TX path are the real ones.
//!
//! ```
//! use datapath::nic::{Nic, NicConfig};
//! use datapath::testing::{small_config, Delivery};
//!
//! let (mut nic, mut kernel) = Nic::fake(small_config()).expect("fake nic");
//! // A frame nobody claimed is passed to the (absent) kernel stack.
//! assert_eq!(kernel.deliver(&mut nic, &[0u8; 60]), Delivery::Passed);
//! assert!(kernel.take_tx(&mut nic).is_empty());
//! ```
//!
//! - Build: [`Nic::fake`] (one queue) or [`Nic::fake_in`] over
//!   [`QueueGroup::in_memory`](crate::group::QueueGroup::in_memory)
//!   (several queues sharing one steering). [`small_config`] is a
//!   configuration that maps a few hundred KiB instead of the default's
//!   96 MiB.
//! - Receive: [`FakeKernel::deliver`] steers a frame as the XDP program
//!   would ([`MemorySteering`]: a flow's own socket, a listener's or a
//!   foreign flow's catch-all, passed, or dropped) and writes it into
//!   fill-ring frames on that socket's RX ring;
//!   [`FakeKernel::deliver_to_catch_all`] skips the steering. Then
//!   [`Nic::poll_rx`] as usual.
//! - Transmit: after [`Nic::send`] and [`Nic::flush`],
//!   [`FakeKernel::take_tx`] returns each packet's bytes and holds its
//!   frames; [`FakeKernel::complete`] / [`FakeKernel::complete_all`] put
//!   them on the completion ring (hold them back to test back-pressure),
//!   reclaimed by the next [`Nic::flush`].
//! - Look: [`FakeKernel::fill_ring_frames`], [`FakeKernel::held_completions`],
//!   [`Nic::steering`] (counters of the in-memory program).
//!
//! A [`FakeKernel`] belongs to the [`Nic`] it was made with (each call
//! takes that `Nic`, and panics for another): frame bytes live in the
//! Nic's UMEM, so the borrow checker keeps "kernel" and datapath apart.

use crate::nic::NicConfig;
use crate::sys::umem::UmemConfig;
use crate::xsk::XskConfig;

pub use crate::nic::testing::Delivery;
pub use crate::steer::{MemorySteering, SteerAction};
pub use crate::xsk::testing::{FakeKernel, RxRefused};

#[cfg(doc)]
use crate::nic::Nic;

/// A small datapath configuration for fake NICs: 256 frames of 2 KiB (64
/// for TX), 1 MiB of MR area, rings of 64, 64 flows.
pub fn small_config() -> NicConfig {
    NicConfig {
        xsk: XskConfig {
            umem: UmemConfig {
                frame_size: 2048,
                frame_count: 256,
                mr_bytes: 1 << 20,
                hugepages: false,
                mr_slots: None,
            },
            tx_frames: 64,
            rx_ring: 64,
            tx_ring: 64,
            fill_ring: 128,
            comp_ring: 64,
            flow_rx_ring: 64,
            need_wakeup: false,
            ..XskConfig::default()
        },
        max_flows: 64,
        max_regions: 16,
        max_recv_segments: 64,
        max_send_segments: 64,
        ..NicConfig::default()
    }
}
