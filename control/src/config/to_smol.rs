//! Configuration → the smoltcp provider's settings
//! ([`crate::engine::smol::SmolConfig`]), for `transport.kind = "smoltcp"`.

use super::{Config, Congestion};
use crate::engine::smol::{SmolConfig, SmolCongestion};

impl Config {
    /// The smoltcp provider's configuration for queue `queue`: the same
    /// datapath, ports and threads as [`Config::stack_config`], smoltcp's
    /// congestion controller from `transport.congestion`, its delayed ACK
    /// from `transport.delayed_ack` and its give-up time from
    /// `transport.user_timeout`.
    ///
    /// # Errors
    /// `transport.congestion` names a controller smoltcp lacks (a loaded
    /// configuration was already checked for this; the message names the key).
    pub fn smol_config(&self, queue: u32) -> Result<SmolConfig, crate::engine::smol::SmolError> {
        let t = &self.transport;
        let congestion = match t.congestion {
            Congestion::None => SmolCongestion::None,
            Congestion::Algorithm(a) => a.name().parse()?,
        };
        let defaults = SmolConfig::default();
        Ok(SmolConfig {
            stack: self.stack_config(queue),
            congestion,
            ack_delay: t.delayed_ack.get().map(|d| d.get()),
            timeout: t.user_timeout.get().map(|d| d.get()).or(defaults.timeout),
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoltcp_config_maps_the_congestion_key_and_refuses_dedicated_threads() {
        let c = Config::from_toml_str("[transport]\nkind = \"smoltcp\"\ncongestion = \"reno\"\n")
            .unwrap();
        assert_eq!(c.smol_config(0).unwrap().congestion, SmolCongestion::Reno);
        let c = Config::from_toml_str("[transport]\nkind = \"smoltcp\"\ncongestion = \"none\"\n")
            .unwrap();
        assert_eq!(c.smol_config(0).unwrap().congestion, SmolCongestion::None);
        let e = Config::from_toml_str(
            "[transport]\nkind = \"smoltcp\"\ncongestion = \"cubic\"\n[threads]\nmode = \"dedicated\"\ntransport_core = 0\n",
        )
        .unwrap_err();
        assert!(e.keys().contains(&"threads.mode"), "{e}");
    }
}
