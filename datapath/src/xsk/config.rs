//! How to open a port: ring sizes, bind mode, wakeup, multi-buffer and
//! socket options. Published to users through [`crate::config`].

use super::XskError;
use crate::sys::umem::UmemConfig;

/// The most fragments one multi-buffer packet may have (MAX_SKB_FRAGS + 1).
pub const MAX_FRAGS: usize = 18;

/// Largest ring (RX, TX, fill, completion, per-flow RX): a million
/// entries. The kernel maps what it is asked for; the bound keeps a typo
/// from asking for gigabytes.
pub const MAX_RING_SIZE: u32 = 1 << 20;
/// Largest UMEM frame count: 4 Mi frames (16 GiB of 4 KiB frames).
pub const MAX_FRAME_COUNT: u32 = 1 << 22;

/// How to bind: zero-copy needs driver support (not on veth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// `XDP_COPY`: works on every driver with XDP.
    Copy,
    /// `XDP_ZEROCOPY`: fails where the driver lacks support.
    ZeroCopy,
    /// Try zero-copy, fall back to copy.
    #[default]
    Auto,
}

/// The mode the kernel bound the owner socket in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundMode {
    /// Copy mode.
    Copy,
    /// Zero-copy mode.
    ZeroCopy,
}

/// Busy-poll socket options (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`,
/// `SO_BUSY_POLL_BUDGET`; kernel 5.11+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// `SO_BUSY_POLL` in microseconds.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET` in packets.
    pub budget: u32,
}

/// Everything needed to open a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XskConfig {
    /// UMEM geometry.
    pub umem: UmemConfig,
    /// Frames kept for TX (the rest circulate through the fill ring).
    pub tx_frames: u32,
    /// Owner socket's RX ring entries.
    pub rx_ring: u32,
    /// Owner socket's TX ring entries.
    pub tx_ring: u32,
    /// Fill ring entries.
    pub fill_ring: u32,
    /// Completion ring entries.
    pub comp_ring: u32,
    /// RX ring entries of each per-flow socket (keep small: see module docs).
    pub flow_rx_ring: u32,
    /// Copy, zero-copy or automatic.
    pub bind: BindMode,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Bind with `XDP_USE_SG` to receive and send multi-buffer packets.
    pub multi_buffer: bool,
    /// Busy-poll options, if any.
    pub busy_poll: Option<BusyPoll>,
    /// `XDP_MAX_TX_SKB_BUDGET` (copy mode); `None` keeps the kernel default.
    pub tx_budget: Option<u32>,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            umem: UmemConfig::default(),
            tx_frames: 1024,
            rx_ring: 2048,
            tx_ring: 2048,
            fill_ring: 8192,
            comp_ring: 2048,
            flow_rx_ring: 2048,
            bind: BindMode::Auto,
            need_wakeup: true,
            multi_buffer: false,
            busy_poll: None,
            tx_budget: Some(256),
        }
    }
}

impl XskConfig {
    /// Refuses what the kernel would refuse later with a vaguer error.
    ///
    /// # Errors
    /// [`XskError::Config`] naming the field: more than
    /// [`MAX_FRAME_COUNT`] frames, no RX frames left after `tx_frames`, or a
    /// ring size that is not a power of two or is above [`MAX_RING_SIZE`].
    pub(crate) fn validate(&self) -> Result<(), XskError> {
        let frames = self.umem.frame_count;
        if frames > MAX_FRAME_COUNT {
            return Err(XskError::Config(format!(
                "frame_count ({frames}) is above the maximum {MAX_FRAME_COUNT}"
            )));
        }
        if self.tx_frames == 0 || self.tx_frames >= frames {
            return Err(XskError::Config(format!(
                "tx_frames ({}) must be between 1 and frame_count - 1 ({})",
                self.tx_frames,
                frames.saturating_sub(1)
            )));
        }
        for (name, size) in [
            ("rx_ring", self.rx_ring),
            ("tx_ring", self.tx_ring),
            ("fill_ring", self.fill_ring),
            ("comp_ring", self.comp_ring),
            ("flow_rx_ring", self.flow_rx_ring),
        ] {
            if !size.is_power_of_two() {
                return Err(XskError::Config(format!(
                    "{name} ({size}) must be a power of two"
                )));
            }
            if size > MAX_RING_SIZE {
                return Err(XskError::Config(format!(
                    "{name} ({size}) is above the maximum {MAX_RING_SIZE}"
                )));
            }
        }
        Ok(())
    }

    /// The `sxdp_flags` every bind of the owner carries besides the mode.
    pub(crate) fn bind_flags(&self) -> u16 {
        let mut flags = 0u16;
        if self.need_wakeup {
            flags |= libc::XDP_USE_NEED_WAKEUP;
        }
        if self.multi_buffer {
            flags |= libc::XDP_USE_SG;
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        assert!(XskConfig::default().validate().is_ok());
        let mut c = XskConfig::default();
        c.tx_frames = c.umem.frame_count;
        assert!(c.validate().unwrap_err().to_string().contains("tx_frames"));
        let c = XskConfig {
            flow_rx_ring: 1000,
            ..XskConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("flow_rx_ring (1000)"), "{e}");
    }

    #[test]
    fn bind_flags_follow_the_options() {
        let mut c = XskConfig::default();
        assert_eq!(c.bind_flags(), libc::XDP_USE_NEED_WAKEUP);
        c.need_wakeup = false;
        c.multi_buffer = true;
        assert_eq!(c.bind_flags(), libc::XDP_USE_SG);
    }
}
