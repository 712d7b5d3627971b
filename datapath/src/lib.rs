//! zerosplit's datapath: the software NIC.

#[allow(
    unsafe_code,
    reason = "the AF_XDP ring layer and syscalls live here, each unsafe block with a SAFETY comment"
)]
pub mod sys;
