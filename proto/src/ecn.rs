//! The ECN field of the IP header.

/// ECN codepoint of the IPv4 header (RFC 3168 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ecn {
    /// Not ECN-capable transport (00).
    #[default]
    NotEct,
    /// ECT(1) (01).
    Ect1,
    /// ECT(0) (10).
    Ect0,
    /// Congestion experienced (11).
    Ce,
}

impl Ecn {
    /// The codepoint from the low two bits of `bits`.
    pub const fn from_bits(bits: u8) -> Ecn {
        match bits & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit codepoint.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip() {
        for b in 0..4 {
            assert_eq!(Ecn::from_bits(b).bits(), b);
        }
        assert_eq!(Ecn::from_bits(0b110), Ecn::Ect0);
    }
}
