//! The `registry!` macro: one row per shipped algorithm generates
//! everything that lists the algorithms. Invoked once, in `cc/mod.rs`.
//!
//! A row reads
//!
//! ```text
//! /// Doc comment of the variant (cite the specification).
//! name ["alias", ...] => Variant(ControllerType, ParamsType),
//! ```
//!
//! where `name` is the config name (lowercase; also the `[transport.cc.<name>]`
//! table and the [`CcParams`](super::CcParams) field), `ControllerType`
//! implements [`Controller`](super::Controller) and has
//! `new(&CcConfig) -> Self`, and `ParamsType` implements
//! [`Params`](super::Params). From the rows the macro generates
//!
//! * [`CcParams`](super::CcParams), one field per algorithm;
//! * [`Algorithm`](super::Algorithm) with [`Algorithm::ALL`](super::Algorithm::ALL),
//!   `name`, the aliases `FromStr` accepts, and `build`;
//! * [`Cc`](super::Cc), the enum the transport holds, and its
//!   [`Controller`](super::Controller) impl: one `match` per method, so the
//!   per-segment path makes no virtual call for a shipped algorithm.

/// See the module docs.
macro_rules! registry {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident [$($alias:literal),*] => $variant:ident($ty:ty, $params:ty)
    ),* $(,)?) => {
        /// Every algorithm's own parameters: `[transport.cc.<name>]` in the
        /// config file, one field per algorithm, named as in config.
        #[derive(Debug, Clone, Default, PartialEq)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(default, deny_unknown_fields)
        )]
        pub struct CcParams {
            $(
                #[doc = concat!("Parameters of [`", stringify!($variant), "`].")]
                pub $field: $params,
            )*
        }

        impl CcParams {
            /// Checks every algorithm's parameters: the first bad value of
            /// each algorithm, naming the algorithm and its key.
            pub fn problems(&self) -> Vec<InvalidCcConfig> {
                let mut problems = Vec::new();
                $(
                    if let Err(e) = Params::validate(&self.$field) {
                        problems.push(InvalidCcConfig::Param {
                            algorithm: stringify!($field),
                            key: e.key,
                            value: e.value,
                            expected: e.expected,
                        });
                    }
                )*
                problems
            }

            /// Checks every algorithm's parameters.
            ///
            /// # Errors
            /// The first bad value, naming the algorithm and its key.
            pub fn validate(&self) -> Result<(), InvalidCcConfig> {
                match self.problems().into_iter().next() {
                    Some(problem) => Err(problem),
                    None => Ok(()),
                }
            }
        }

        /// The algorithms zerosplit ships, selected by name from config,
        /// plus [`Algorithm::Custom`] for a controller defined elsewhere.
        #[derive(Debug, Clone, Copy)]
        pub enum Algorithm {
            $(
                $(#[doc = $doc])*
                $variant,
            )*
            /// A controller outside the registry: the research hook (see
            /// [`CustomAlgorithm`]). Never in [`Algorithm::ALL`], never
            /// parsed from a name.
            Custom(&'static CustomAlgorithm),
        }

        impl Algorithm {
            /// Every shipped algorithm, for help texts and for tests that
            /// run each one.
            pub const ALL: &'static [Algorithm] = &[$(Algorithm::$variant),*];

            /// The name used in config files and on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $(Algorithm::$variant => stringify!($field),)*
                    Algorithm::Custom(custom) => custom.name,
                }
            }

            /// Other names `FromStr` accepts for this algorithm.
            pub fn aliases(self) -> &'static [&'static str] {
                match self {
                    $(Algorithm::$variant => &[$($alias),*],)*
                    Algorithm::Custom(_) => &[],
                }
            }

            /// Builds a controller of this algorithm.
            pub fn build(self, config: &CcConfig) -> Cc {
                match self {
                    $(Algorithm::$variant => Cc::$variant(<$ty>::new(config)),)*
                    Algorithm::Custom(custom) => Cc::Custom(custom, (custom.build)(config)),
                }
            }
        }

        /// A controller of any algorithm; enum dispatch keeps the
        /// per-segment path free of virtual calls for shipped ones.
        #[derive(Debug)]
        pub enum Cc {
            $(
                #[doc = concat!("See [`", stringify!($variant), "`].")]
                $variant($ty),
            )*
            /// A [`CustomAlgorithm`]'s controller, behind a virtual call.
            Custom(&'static CustomAlgorithm, Box<dyn Controller>),
        }

        impl Cc {
            /// Which algorithm this is.
            pub fn algorithm(&self) -> Algorithm {
                match self {
                    $(Cc::$variant(_) => Algorithm::$variant,)*
                    Cc::Custom(custom, _) => Algorithm::Custom(custom),
                }
            }
        }

        impl Controller for Cc {
            fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
                match self {
                    $(Cc::$variant(c) => c.on_sent(now, bytes, bytes_in_flight),)*
                    Cc::Custom(_, c) => c.on_sent(now, bytes, bytes_in_flight),
                }
            }
            fn on_ack(&mut self, ack: &AckEvent<'_>) {
                match self {
                    $(Cc::$variant(c) => c.on_ack(ack),)*
                    Cc::Custom(_, c) => c.on_ack(ack),
                }
            }
            fn on_congestion_event(&mut self, event: &CongestionEvent) {
                match self {
                    $(Cc::$variant(c) => c.on_congestion_event(event),)*
                    Cc::Custom(_, c) => c.on_congestion_event(event),
                }
            }
            fn on_ecn(&mut self, event: &EcnEvent) {
                match self {
                    $(Cc::$variant(c) => c.on_ecn(event),)*
                    Cc::Custom(_, c) => c.on_ecn(event),
                }
            }
            fn on_mss_update(&mut self, mss: u16) {
                match self {
                    $(Cc::$variant(c) => c.on_mss_update(mss),)*
                    Cc::Custom(_, c) => c.on_mss_update(mss),
                }
            }
            fn window(&self) -> u64 {
                match self {
                    $(Cc::$variant(c) => c.window(),)*
                    Cc::Custom(_, c) => c.window(),
                }
            }
            fn minimum_window(&self) -> u64 {
                match self {
                    $(Cc::$variant(c) => c.minimum_window(),)*
                    Cc::Custom(_, c) => c.minimum_window(),
                }
            }
            fn pacing_rate(&self) -> Option<u64> {
                match self {
                    $(Cc::$variant(c) => c.pacing_rate(),)*
                    Cc::Custom(_, c) => c.pacing_rate(),
                }
            }
            fn wants_ecn(&self) -> bool {
                match self {
                    $(Cc::$variant(c) => c.wants_ecn(),)*
                    Cc::Custom(_, c) => c.wants_ecn(),
                }
            }
            fn governs_recovery(&self) -> bool {
                match self {
                    $(Cc::$variant(c) => c.governs_recovery(),)*
                    Cc::Custom(_, c) => c.governs_recovery(),
                }
            }
            fn metrics(&self) -> ControllerMetrics {
                match self {
                    $(Cc::$variant(c) => c.metrics(),)*
                    Cc::Custom(_, c) => c.metrics(),
                }
            }
        }
    };
}
