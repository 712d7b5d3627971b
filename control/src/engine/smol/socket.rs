//! smoltcp TCP sockets as the provider uses them: built from the
//! configuration, listening, and their states in the header-only TCP's terms.

use std::time::Duration;

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State as SmolState};
use smoltcp::time::Duration as SmolDuration;
use transports::tcp::State;

use super::config::{SmolConfig, SmolError};

/// A TCP socket with the configured buffers and options.
pub(super) fn new_socket(config: &SmolConfig) -> tcp::Socket<'static> {
    let n = config.socket_buffer;
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0u8; n]),
        tcp::SocketBuffer::new(vec![0u8; n]),
    );
    s.set_congestion_control(config.congestion.to_smoltcp());
    s.set_nagle_enabled(false);
    s.set_ack_delay(config.ack_delay.map(smol_duration));
    s.set_timeout(config.timeout.map(smol_duration));
    s
}

/// Adds a socket listening on `port`.
pub(super) fn add_listening_socket(
    sockets: &mut SocketSet<'static>,
    config: &SmolConfig,
    port: u16,
) -> Result<SocketHandle, SmolError> {
    let mut s = new_socket(config);
    s.listen(port).map_err(|e| SmolError::Listen {
        port,
        message: e.to_string(),
    })?;
    Ok(sockets.add(s))
}

fn smol_duration(d: Duration) -> SmolDuration {
    SmolDuration::from_micros(d.as_micros().min(u128::from(u64::MAX)) as u64)
}

/// smoltcp's TCP state in the header-only TCP's terms (RFC 9293 3.3.2
/// names both follow; LISTEN never reaches a connection).
pub(super) fn map_state(s: SmolState) -> State {
    match s {
        SmolState::Closed | SmolState::Listen => State::Closed,
        SmolState::SynSent => State::SynSent,
        SmolState::SynReceived => State::SynReceived,
        SmolState::Established => State::Established,
        SmolState::FinWait1 => State::FinWait1,
        SmolState::FinWait2 => State::FinWait2,
        SmolState::CloseWait => State::CloseWait,
        SmolState::Closing => State::Closing,
        SmolState::LastAck => State::LastAck,
        SmolState::TimeWait => State::TimeWait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_smoltcp_state_maps_and_synchronized_states_stay_synchronized() {
        use SmolState::*;
        for s in [
            Closed,
            Listen,
            SynSent,
            SynReceived,
            Established,
            FinWait1,
            FinWait2,
            CloseWait,
            Closing,
            LastAck,
            TimeWait,
        ] {
            let ours = map_state(s);
            let smol_sync = !matches!(s, Closed | Listen | SynSent);
            assert_eq!(ours.is_synchronized(), smol_sync, "{s:?} -> {ours:?}");
        }
    }
}
